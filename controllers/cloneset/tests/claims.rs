//! A CloneSet's volume claims on the dev cluster, as OpenKruise keeps them:
//! a pod the controller deletes (scale-in) takes its claims with it; a pod
//! deleted by someone else is recreated under the same instance id and
//! binds its old claims; with `disablePVCReuse` those claims are deleted
//! and the new pod gets new ones.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_api::CloneSet;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_core::cloneset::LABEL_INSTANCE_ID;
use kruise_devcluster::crds::install_converted_by;
use kruise_devcluster::{DevCluster, Options};
use kruise_wasm_host::server::start_conversion_only;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

const NAME: &str = "claims";

fn cloneset() -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": NAME, "namespace": "default"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.25",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    }))
    .unwrap()
}

/// Instance ids of the pods, and of the claims not being deleted (with
/// their uids), once both settle on `count` each.
struct Ids {
    pods: BTreeSet<String>,
    claims: BTreeSet<(String, String)>,
}

async fn ids(client: &Client) -> Ids {
    let by_app = ListParams::default().labels(&format!("app={NAME}"));
    let id = |labels: &std::collections::BTreeMap<String, String>| {
        labels.get(LABEL_INSTANCE_ID).cloned().unwrap_or_default()
    };
    let pods = Api::<Pod>::namespaced(client.clone(), "default")
        .list(&by_app)
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| id(p.labels()))
        .collect();
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default")
        .list(&by_app)
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| (id(c.labels()), c.uid().unwrap_or_default()))
        .collect();
    Ids { pods, claims }
}

/// Waits until `count` pods and `count` claims exist with the same ids.
async fn settled(client: &Client, count: usize, what: &str) -> Ids {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let now = ids(client).await;
        let claim_ids: BTreeSet<String> = now.claims.iter().map(|(id, _)| id.clone()).collect();
        if now.pods.len() == count && claim_ids == now.pods {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: pods {:?}, claims {:?}",
            now.pods,
            now.claims
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the controller's status reports `generation`.
async fn observed(clonesets: &Api<CloneSet>, generation: Option<i64>) {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let now = clonesets.get(NAME).await.unwrap();
        if now.status.and_then(|s| s.observed_generation) == generation {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "generation {generation:?} never observed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn claims_follow_their_pods_and_are_reused_unless_disabled() {
    let cluster = DevCluster::start(Options::default()).await.unwrap();
    let client = cluster.client();
    // Our CRDs store v1beta1: the API server converts through a host.
    let _converter = install_converted_by(&cluster, start_conversion_only)
        .await
        .unwrap();
    tokio::spawn(kruise_cloneset_controller::run(
        client.clone(),
        SharedWatches::new(client.clone()),
    ));
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    clonesets
        .create(&PostParams::default(), &cloneset())
        .await
        .unwrap();
    let three = settled(&client, 3, "three pods with a claim each").await;

    // Scale-in: the removed pod's claim goes with it.
    let two = json!({"spec": {"replicas": 2}});
    clonesets
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&two))
        .await
        .unwrap();
    let after_scale_in = settled(&client, 2, "scale-in to two").await;
    assert!(
        after_scale_in.claims.is_subset(&three.claims),
        "no claim recreated"
    );

    // A pod deleted by hand comes back under its id, on its old claim.
    let gone = after_scale_in.pods.iter().next().unwrap().clone();
    pods.delete(&format!("{NAME}-{gone}"), &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_mins(1);
    while pods
        .get_opt(&format!("{NAME}-{gone}"))
        .await
        .unwrap()
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    {
        assert!(Instant::now() < deadline, "pod {gone} never came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reused = settled(&client, 2, "the pod back on its claim").await;
    assert_eq!(
        reused.claims, after_scale_in.claims,
        "the same claims, same uids"
    );

    // With reuse disabled, the claim goes and the new pod gets a new one.
    let disable = json!({"spec": {"scaleStrategy": {"disablePVCReuse": true}}});
    let disabled = clonesets
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&disable))
        .await
        .unwrap();
    // The pod's deletion and the CloneSet's change arrive on different
    // watches: until the controller reports the new generation, it may still
    // act on the old spec and reuse the claim.
    observed(&clonesets, disabled.metadata.generation).await;
    pods.delete(&format!("{NAME}-{gone}"), &DeleteParams::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_mins(1);
    let renewed = loop {
        let now = settled(&client, 2, "a new pod with a new claim").await;
        if !now.pods.contains(&gone) {
            break now;
        }
        assert!(Instant::now() < deadline, "the id {gone} was reused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let kept: Vec<_> = reused.claims.iter().filter(|(id, _)| *id != gone).collect();
    assert!(
        kept.iter().all(|claim| renewed.claims.contains(*claim)),
        "the other claim kept"
    );
}
