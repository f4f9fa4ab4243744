//! A Secret to all namespaces on the dev cluster: kube-system and
//! kube-public never get one, `stringData` is distributed as the API
//! server stores it without a rewrite on every reconcile, a new namespace
//! gets its copy, and a distribution of something else than a Secret or
//! ConfigMap is reported and left alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use kruise_api::ResourceDistribution;
use kruise_core::resourcedistribution::RESOURCE_HASH_ANNOTATION;
use kruise_devcluster::crds::install_converted_by;
use kruise_devcluster::wait::{eventually, wait_for};
use kruise_devcluster::{DevCluster, Options};
use kruise_resourcedistribution_controller::run;
use kruise_wasm_host::server::start_conversion_only;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const NAME: &str = "pull-secret";
const SECRET: &str = "registry";

fn distribution(name: &str, resource: &Value) -> ResourceDistribution {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ResourceDistribution",
        "metadata": {"name": name},
        "spec": {
            "resource": resource,
            "targets": {
                "allNamespaces": true,
                "excludedNamespaces": {"list": [{"name": "team-b"}]},
            },
        },
    }))
    .unwrap()
}

async fn create_namespace(client: &Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
}

/// The namespaces that should hold a copy: all but team-b, kube-system and
/// kube-public.
async fn expected_targets(client: &Client) -> BTreeSet<String> {
    Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .filter(|name| !["team-b", "kube-system", "kube-public"].contains(&name.as_str()))
        .collect()
}

async fn secrets(client: &Client) -> BTreeMap<String, Secret> {
    Api::<Secret>::all(client.clone())
        .list(&ListParams::default().fields(&format!("metadata.name={SECRET}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| (s.metadata.namespace.clone().unwrap(), s))
        .collect()
}

async fn wait_for_secrets(client: &Client) -> BTreeMap<String, Secret> {
    eventually("a copy of the Secret in every target", || async {
        let expected = expected_targets(client).await;
        let found = secrets(client).await;
        (found.keys().cloned().collect::<BTreeSet<_>>() == expected).then_some(found)
    })
    .await
}

fn resource_versions(secrets: &BTreeMap<String, Secret>) -> BTreeMap<String, String> {
    secrets
        .iter()
        .map(|(ns, s)| (ns.clone(), s.metadata.resource_version.clone().unwrap()))
        .collect()
}

#[tokio::test]
async fn secret_to_all_namespaces() {
    let cluster = DevCluster::start(Options::default()).await.unwrap();
    let client = cluster.client();
    // Our CRDs store v1beta1: the API server converts through a host.
    let _converter = install_converted_by(&cluster, start_conversion_only)
        .await
        .unwrap();
    for name in ["team-a", "team-b"] {
        create_namespace(&client, name).await;
    }
    tokio::spawn(run(client.clone()));

    // Every namespace but team-b and the two system ones; stringData ends
    // up in data, as the API server stores it.
    let rds: Api<ResourceDistribution> = Api::all(client.clone());
    let resource = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "labels": {"app": "registry"}},
        "stringData": {"token": "abc"},
        "data": {"raw": "cmF3"},
    });
    rds.create(&PostParams::default(), &distribution(NAME, &resource))
        .await
        .unwrap();
    let copies = wait_for_secrets(&client).await;
    let desired = i32::try_from(copies.len()).unwrap();
    assert!(copies.contains_key("team-a") && copies.contains_key("default"));
    for copy in copies.values() {
        let data = copy.data.as_ref().unwrap();
        assert_eq!(data["token"].0, b"abc");
        assert_eq!(data["raw"].0, b"raw");
        assert_eq!(copy.type_.as_deref(), Some("Opaque"));
        assert_eq!(copy.metadata.labels.as_ref().unwrap()["app"], "registry");
        assert!(copy.metadata.annotations.as_ref().unwrap()[RESOURCE_HASH_ANNOTATION].len() == 64);
    }
    let rd = wait_for(&rds, NAME, "status", |rd| {
        let status = rd.status.as_ref()?;
        (status.desired == desired && status.succeeded == desired).then(|| rd.clone())
    })
    .await;
    assert_eq!(rd.status.as_ref().unwrap().failed, 0);

    // A reconcile with nothing to do writes nothing: stringData versus the
    // stored data is no difference.
    rds.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    let touched = rds.get(NAME).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        resource_versions(&secrets(&client).await),
        resource_versions(&copies),
        "a no-op reconcile rewrote a Secret"
    );
    assert_eq!(
        rds.get(NAME).await.unwrap().metadata.resource_version,
        touched.metadata.resource_version,
        "a no-op reconcile wrote the status"
    );

    // A new namespace gets its copy.
    create_namespace(&client, "team-c").await;
    let copies = wait_for_secrets(&client).await;
    assert!(copies.contains_key("team-c"));
    wait_for(&rds, NAME, "status counts team-c", |rd| {
        (rd.status.as_ref()?.desired == desired + 1).then_some(())
    })
    .await;

    // A distribution of a Pod cannot be planned: a Warning event, no
    // status, no writes.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    rds.create(&PostParams::default(), &distribution("broken", &pod))
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let event = eventually("an InvalidSpec event", || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("broken")
                    && e.reason.as_deref() == Some("InvalidSpec")
            })
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(event.note.unwrap().contains("Pod"));
    assert!(rds.get("broken").await.unwrap().status.is_none());
}
