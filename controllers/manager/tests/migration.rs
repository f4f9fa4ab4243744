//! A cluster OpenKruise v1.9.0 ran, taken over by our webhooks and
//! controllers. The objects are written as OpenKruise wrote them (from the
//! data recorded from its code, policies/fixtures/openkruise-v1.9.0) while
//! no controller of ours runs; then ours start.
//! * A pod OpenKruise injected (recorded case 15: two sidecars, one with
//!   transferred env) under the SidecarSet OpenKruise stored, hashes
//!   included: the SidecarSet counts the pod as updated, and an image-only
//!   update upgrades its sidecar in place.
//! * The user's `demo` CloneSet as OpenKruise stored it, its
//!   ControllerRevision and five pods as OpenKruise's revision control and
//!   scale named and labelled them: adopted as up to date, with no pod
//!   created, deleted or changed and no second revision.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_api::{CloneSet, SidecarSet};
use kruise_core::cloneset::container_status;
use kruise_devcluster::wait::wait_for;
use kruise_manager::controllers::{Controllers, ImagePullOptions};
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kruise_policy_modules::fixtures;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

const SIDECARSET_CASE: &str = "case0015.json";
const HASH: &str = "kruise.io/sidecarset-hash";
const HASH_WITHOUT_IMAGE: &str = "kruise.io/sidecarset-hash-without-image";

fn recorded(path: &str) -> Value {
    let path = fixtures::dir().join("openkruise-v1.9.0").join(path);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `object` without what the API server sets itself.
fn as_written(mut object: Value) -> Value {
    let metadata = object["metadata"].as_object_mut().unwrap();
    metadata.remove("creationTimestamp");
    object.as_object_mut().unwrap().remove("status");
    object
}

async fn create<K>(client: &Client, namespace: Option<&str>, object: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace.unwrap_or("default"));
    let object: K = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_openkruise_ran_is_taken_over_unchanged() {
    let env = DevEnvironment::start(DevOptions {
        run_controllers: false,
        ..DevOptions::default()
    })
    .await
    .unwrap();
    let client = env.client();
    let injected = write_injected_pod(&client).await;
    let demo = write_openkruise_cloneset(&client).await;

    let mut controllers = Controllers::start(&client, ImagePullOptions::default());
    sidecars_are_upgraded_in_place(&client, &injected).await;
    the_cloneset_is_adopted_unchanged(&client, &demo).await;
    controllers.stop();
    env.shutdown().await;
}

/// Case 15's namespaces, the pod OpenKruise's webhook returned (created
/// while no SidecarSet exists, so our webhook leaves it), then the
/// SidecarSet as OpenKruise stored it. The pod once running.
async fn write_injected_pod(client: &Client) -> Pod {
    let case = recorded(&format!("webhook-cases/{SIDECARSET_CASE}"));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for namespace in case["input"]["namespaces"].as_array().unwrap() {
        let object =
            json!({"metadata": {"name": namespace["name"], "labels": namespace["labels"]}});
        let object: Namespace = serde_json::from_value(object).unwrap();
        // `default` exists already.
        let _ = namespaces.create(&PostParams::default(), &object).await;
        let patch = json!({"metadata": {"labels": namespace["labels"]}});
        let name = namespace["name"].as_str().unwrap();
        namespaces
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
    }
    let theirs = &case["openkruise"];
    let pod = theirs["pod"].clone();
    let namespace = pod["metadata"]["namespace"].as_str().unwrap().to_owned();
    let created: Pod = create(client, Some(&namespace), pod.clone()).await;
    assert_eq!(
        created.annotations().get(HASH),
        pod["metadata"]["annotations"][HASH]
            .as_str()
            .map(str::to_owned)
            .as_ref(),
        "the pod is stored as OpenKruise's webhook returned it"
    );
    let stored = as_written(theirs["storedSidecarSets"][0].clone());
    let sidecar_sets: Api<SidecarSet> = Api::all(client.clone());
    let set: SidecarSet = serde_json::from_value(stored.clone()).unwrap();
    let ours = sidecar_sets
        .create(&PostParams::default(), &set)
        .await
        .unwrap();
    for key in [HASH, HASH_WITHOUT_IMAGE] {
        assert_eq!(
            ours.annotations().get(key).map(String::as_str),
            stored["metadata"]["annotations"][key].as_str(),
            "{key}: our defaulting stamps OpenKruise's hash"
        );
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let name = created.name_any();
    wait_for(&pods, &name, "running", |p| {
        container_status(p, "ss0-s0")?.container_id.as_ref()?;
        Some(p.clone())
    })
    .await
}

/// The SidecarSet counts OpenKruise's pod as up to date; a new image of
/// one sidecar reaches the same pod (same uid) in place.
async fn sidecars_are_upgraded_in_place(client: &Client, pod: &Pod) {
    let sidecar_sets: Api<SidecarSet> = Api::all(client.clone());
    wait_for(&sidecar_sets, "ss0", "the pod counted as updated", |s| {
        let status = s.status.as_ref()?;
        (status.matched_pods == 1 && status.updated_pods == 1).then_some(())
    })
    .await;
    let set = sidecar_sets.get("ss0").await.unwrap();
    let mut containers = serde_json::to_value(&set.spec.containers).unwrap();
    containers[0]["image"] = json!("ss0-s0:2");
    let patch = json!({"spec": {"containers": containers}});
    sidecar_sets
        .patch("ss0", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap());
    let upgraded = wait_for(&pods, &pod.name_any(), "ss0-s0 upgraded in place", |p| {
        let status = container_status(p, "ss0-s0")?;
        (status.image == "ss0-s0:2" && status.ready).then(|| p.clone())
    })
    .await;
    assert_eq!(upgraded.uid(), pod.uid(), "the same pod, not a new one");
    let images: BTreeMap<String, String> = upgraded
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| (c.name, c.image.unwrap_or_default()))
        .collect();
    let expected: BTreeMap<String, String> = [
        ("c0", "img0:1"),
        ("c1", "img1:1"),
        ("ss0-s0", "ss0-s0:2"),
        ("ss0-s1", "ss0-s1:1"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    assert_eq!(images, expected);
}

/// What OpenKruise left of the `demo` CloneSet.
#[derive(Debug)]
struct WrittenCloneSet {
    revision: String,
    /// Each pod's uid and what our controller must leave alone: labels,
    /// annotations and spec.
    pods: BTreeMap<String, (String, Value)>,
}

fn untouched_parts(pod: &Pod) -> (String, Value) {
    let value = json!({
        "labels": pod.metadata.labels,
        "annotations": pod.metadata.annotations,
        "spec": pod.spec,
    });
    (pod.uid().unwrap(), value)
}

/// The user's `demo` CloneSet as OpenKruise stored it, the revision it
/// made, and five pods as its scale wrote them (template labels, instance
/// id, revision name and short hash, lifecycle Normal, the in-place
/// readiness gate, owned by the CloneSet), running and ready.
async fn write_openkruise_cloneset(client: &Client) -> WrittenCloneSet {
    let case = recorded("cloneset-revisions/cs0.json");
    let theirs = &case["openkruise"];
    let set: CloneSet = create(
        client,
        None,
        as_written(theirs["defaultedCloneSet"].clone()),
    )
    .await;
    let owner = json!([{
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "name": set.name_any(), "uid": set.uid(), "controller": true, "blockOwnerDeletion": true,
    }]);
    let template = &theirs["defaultedCloneSet"]["spec"]["template"];
    let revision = theirs["revisionName"].as_str().unwrap().to_owned();
    let hash = theirs["hashLabel"].as_str().unwrap();
    let mut revision_labels = template["metadata"]["labels"].clone();
    revision_labels["controller.kubernetes.io/hash"] = json!(hash);
    let data: Value = serde_json::from_str(theirs["revisionData"].as_str().unwrap()).unwrap();
    let _: ControllerRevision = create(
        client,
        None,
        json!({
            "metadata": {"name": revision, "labels": revision_labels, "ownerReferences": owner},
            "data": data,
            "revision": 1,
        }),
    )
    .await;

    let mut names = Vec::new();
    for id in ["b2c4d", "f5g6h", "j7k8l", "m9n2p", "q4r5s"] {
        let mut labels = template["metadata"]["labels"].clone();
        labels["apps.kruise.io/cloneset-instance-id"] = json!(id);
        labels["controller-revision-hash"] = json!(revision);
        labels["pod-template-hash"] = json!(hash);
        labels["lifecycle.apps.kruise.io/state"] = json!("Normal");
        let mut spec = template["spec"].clone();
        spec["readinessGates"] = json!([{"conditionType": "InPlaceUpdateReady"}]);
        let name = format!("demo-{id}");
        let _: Pod = create(
            client,
            None,
            json!({
                "metadata": {"name": name, "labels": labels, "ownerReferences": owner},
                "spec": spec,
            }),
        )
        .await;
        mark_gates_open(client, &name).await;
        names.push(name);
    }
    // Scheduled and ready, as OpenKruise left them.
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut pods = BTreeMap::new();
    for name in names {
        let ready = wait_for(&api, &name, "ready", |p| {
            let conditions = p.status.as_ref()?.conditions.as_ref()?;
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
                .then(|| p.clone())
        })
        .await;
        pods.insert(name, untouched_parts(&ready));
    }
    WrittenCloneSet { revision, pods }
}

/// The readiness gates' conditions as OpenKruise sets them on a pod no
/// in-place update is under way for: `InPlaceUpdateReady`, and the
/// `KruisePodReady` its pod webhook gave the pod (ours gave it here too)
/// and its pod readiness controller opened.
async fn mark_gates_open(client: &Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let patch = json!({"status": {"conditions": [
        {"type": "InPlaceUpdateReady", "status": "True",
         "lastTransitionTime": "2026-12-01T09:00:00Z"},
        {"type": "KruisePodReady", "status": "True",
         "lastTransitionTime": "2026-12-01T09:00:00Z"},
    ]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
}

/// Our controller reports OpenKruise's revision as current and updated on
/// every pod, and leaves the pods and revisions as they were.
async fn the_cloneset_is_adopted_unchanged(client: &Client, written: &WrittenCloneSet) {
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), "default");
    let status = wait_for(&clonesets, "demo", "5 updated ready replicas", |c| {
        let status = c.status.as_ref()?;
        (status.observed_generation == c.metadata.generation && status.updated_ready_replicas == 5)
            .then(|| status.clone())
    })
    .await;
    assert_eq!(
        status.update_revision.as_deref(),
        Some(written.revision.as_str())
    );
    assert_eq!(
        status.current_revision.as_deref(),
        Some(written.revision.as_str())
    );
    assert_eq!((status.replicas, status.ready_replicas), (5, 5));
    // Long enough for a wrong plan to act (the controller requeues within
    // seconds), then everything as OpenKruise left it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let now: BTreeMap<String, (String, Value)> = pods
        .list(&ListParams::default().labels("app=demo"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| (p.name_any(), untouched_parts(p)))
        .collect();
    assert_eq!(now, written.pods, "the pods as OpenKruise wrote them");
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
    let names: Vec<String> = revisions
        .list(&ListParams::default().labels("app=demo"))
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(names, [written.revision.as_str()], "no second revision");
}
