//! The seed example (examples/resourcedistribution.yaml) end to end on the
//! dev cluster: copies appear in exactly the targets with the annotations
//! and the owner reference, follow the resource, stay put on a no-op,
//! follow namespace labels and target changes, are restored when edited or
//! deleted by hand, never overwrite a foreign object of the same name
//! (reported in the status), and go with the distribution.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use kruise_api::ResourceDistribution;
use kruise_api::resourcedistribution::{
    ResourceDistributionCondition, ResourceDistributionConditionType as Type,
};
use kruise_core::go_json;
use kruise_core::resourcedistribution::{
    MESSAGE_CONFLICT, MESSAGE_NAMESPACE_NOT_EXISTS, RESOURCE_FROM_ANNOTATION,
    RESOURCE_HASH_ANNOTATION, resource_hash,
};
use kruise_devcluster::crds::install_converted_by;
use kruise_devcluster::wait::{eventually, wait_for, wait_gone};
use kruise_devcluster::{DevCluster, Options};
use kruise_resourcedistribution_controller::{CONTROLLER_NAME, run};
use kruise_wasm_host::server::start_conversion_only;
use kube::api::{DeleteParams, GetParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};

const SEED: &str = include_str!("../../../policies/fixtures/examples/resourcedistribution.yaml");
const NAME: &str = "sample";
const COPY: &str = "game-demo";
/// A targeted namespace holding a ConfigMap of the same name that the
/// distribution does not own.
const FOREIGN: &str = "ns-foreign";

async fn create_namespace(client: &Client, name: &str, labels: Value) {
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
}

async fn label_namespace(client: &Client, name: &str, labels: Value) {
    Api::<Namespace>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap();
}

fn configmaps(client: &Client, namespace: &str) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), namespace)
}

/// Every ConfigMap named game-demo, by namespace.
async fn all_copies(client: &Client) -> BTreeMap<String, ConfigMap> {
    Api::<ConfigMap>::all(client.clone())
        .list(&ListParams::default().fields(&format!("metadata.name={COPY}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|cm| (cm.metadata.namespace.clone().unwrap(), cm))
        .collect()
}

fn owned_by(copy: &ConfigMap, distribution: &ResourceDistribution) -> bool {
    copy.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && Some(&r.uid) == distribution.metadata.uid.as_ref())
}

fn annotation<'a>(copy: &'a ConfigMap, key: &str) -> Option<&'a str> {
    copy.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Waits until the copies owned by `distribution` are exactly in
/// `namespaces`, each holding the distributed data and hash.
async fn wait_for_copies(
    client: &Client,
    distribution: &ResourceDistribution,
    namespaces: &[&str],
) -> BTreeMap<String, ConfigMap> {
    let expected: BTreeSet<String> = namespaces.iter().map(|&n| n.to_owned()).collect();
    let hash = resource_hash(&distribution.spec.resource);
    let data = &distribution.spec.resource["data"];
    let what = format!("copies in exactly {expected:?} with hash {hash}");
    eventually(&what, || async {
        let owned: BTreeMap<String, ConfigMap> = all_copies(client)
            .await
            .into_iter()
            .filter(|(_, copy)| owned_by(copy, distribution))
            .collect();
        let current = owned.values().all(|copy| {
            annotation(copy, RESOURCE_HASH_ANNOTATION) == Some(hash.as_str())
                && serde_json::to_value(&copy.data).unwrap() == *data
        });
        (current && owned.keys().cloned().collect::<BTreeSet<_>>() == expected).then_some(owned)
    })
    .await
}

/// Waits until the status describes the current generation with these
/// counts.
async fn wait_for_status(
    rds: &Api<ResourceDistribution>,
    desired: i32,
    succeeded: i32,
) -> ResourceDistribution {
    wait_for(
        rds,
        NAME,
        &format!("status of the current generation: desired {desired}, succeeded {succeeded}"),
        |rd| {
            let status = rd.status.as_ref()?;
            (status.observed_generation == rd.metadata.generation
                && status.desired == desired
                && status.succeeded == succeeded
                && status.failed == desired - succeeded)
                .then(|| rd.clone())
        },
    )
    .await
}

fn condition(rd: &ResourceDistribution, type_: Type) -> &ResourceDistributionCondition {
    rd.status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap()
}

/// The six conditions in order; those in `failing` are True with exactly
/// these namespaces, the others False/Succeeded.
fn assert_conditions(rd: &ResourceDistribution, failing: &[(Type, &[&str], &str)]) {
    let conditions = &rd.status.as_ref().unwrap().conditions;
    let types: Vec<Type> = conditions.iter().map(|c| c.type_).collect();
    assert_eq!(types, Type::ALL);
    for c in conditions {
        assert!(c.last_transition_time.is_some(), "{c:?}");
        if let Some((_, namespaces, reason)) = failing.iter().find(|(t, ..)| *t == c.type_) {
            assert_eq!(c.status, "True", "{c:?}");
            assert_eq!(c.failed_namespaces, *namespaces, "{c:?}");
            assert_eq!(c.reason.as_deref(), Some(*reason), "{c:?}");
        } else {
            assert_eq!(c.status, "False", "{c:?}");
            assert!(c.failed_namespaces.is_empty(), "{c:?}");
            assert_eq!(c.reason.as_deref(), Some("Succeeded"), "{c:?}");
        }
    }
}

fn resource_versions(copies: &BTreeMap<String, ConfigMap>) -> BTreeMap<String, String> {
    copies
        .iter()
        .map(|(ns, cm)| (ns.clone(), cm.metadata.resource_version.clone().unwrap()))
        .collect()
}

async fn patch_distribution(rds: &Api<ResourceDistribution>, patch: Value) {
    rds.patch(NAME, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// The cluster as the steps share it.
struct World {
    client: Client,
    rds: Api<ResourceDistribution>,
    /// The ConfigMap game-demo in ns-foreign, not the distribution's.
    foreign: ConfigMap,
    /// The ConfigMap game-demo in ns-3 (excluded), not the distribution's.
    bystander: ConfigMap,
}

#[tokio::test]
async fn seed_example_end_to_end() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "kruise_resourcedistribution_controller=debug".into()),
        )
        .with_test_writer()
        .try_init();
    let cluster = DevCluster::start(Options::default()).await.unwrap();
    let client = cluster.client();
    // Our CRDs store v1beta1: the API server converts through a host.
    let _converter = install_converted_by(&cluster, start_conversion_only)
        .await
        .unwrap();
    let world = set_up(client.clone()).await;
    tokio::spawn(run(client));

    let hash = copies_appear_in_the_targets(&world).await;
    a_no_op_writes_nothing(&world).await;
    a_resource_change_updates_every_copy(&world, &hash).await;
    a_labelled_namespace_gets_a_copy(&world).await;
    copies_edited_or_deleted_by_hand_are_restored(&world).await;
    shrinking_the_targets_deletes_copies(&world).await;
    a_missing_namespace_is_reported_then_served(&world).await;
    events_are_published(&world).await;
    the_conflict_clears_when_the_foreign_object_goes(&world).await;
    deleting_the_distribution_removes_the_copies(&world).await;
}

/// ns-1 and ns-4 are listed, ns-2 and ns-foreign are labelled group=test,
/// ns-3 is labelled but excluded, ns-5 is not a target (yet), and
/// kube-system, though labelled, never is.
async fn set_up(client: Client) -> World {
    let test = json!({"group": "test"});
    for (name, labels) in [
        ("ns-1", json!({})),
        ("ns-2", test.clone()),
        ("ns-3", test.clone()),
        ("ns-4", json!({})),
        ("ns-5", json!({})),
        (FOREIGN, test.clone()),
    ] {
        create_namespace(&client, name, labels).await;
    }
    label_namespace(&client, "kube-system", test).await;
    let foreign: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": COPY, "labels": {"owner": "someone-else"}},
        "data": {"mine": "yes"},
    }))
    .unwrap();
    let foreign = configmaps(&client, FOREIGN)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let bystander: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": COPY}, "data": {"other": "1"}}))
            .unwrap();
    let bystander = configmaps(&client, "ns-3")
        .create(&PostParams::default(), &bystander)
        .await
        .unwrap();
    World {
        rds: Api::all(client.clone()),
        client,
        foreign,
        bystander,
    }
}

/// Copies in the four targets but the foreign one, with the annotations
/// and the owner reference; the status counts the conflict. Returns the
/// hash.
async fn copies_appear_in_the_targets(world: &World) -> String {
    let seed: ResourceDistribution = serde_yaml::from_str(SEED).unwrap();
    world
        .rds
        .create(&PostParams::default(), &seed)
        .await
        .unwrap();
    let rd = wait_for_status(&world.rds, 4, 3).await;
    assert_eq!(rd.status.as_ref().unwrap().observed_generation, Some(1));
    assert_conditions(
        &rd,
        &[(Type::ConflictOccurred, &[FOREIGN], MESSAGE_CONFLICT)],
    );
    let copies = wait_for_copies(&world.client, &rd, &["ns-1", "ns-2", "ns-4"]).await;
    let hash = resource_hash(&rd.spec.resource);
    // OpenKruise hashes the raw bytes the API server serves; they are the
    // Go encoding kruise-core reproduces, byte for byte.
    let raw = world
        .client
        .request_text(
            kube::core::Request::new(ResourceDistribution::url_path(&(), None))
                .get(NAME, &GetParams::default())
                .unwrap(),
        )
        .await
        .unwrap();
    let served: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(
        go_json::unstructured(&served),
        raw.trim_end(),
        "the API server's bytes differ from the Go encoding"
    );
    for (namespace, copy) in &copies {
        assert_eq!(
            annotation(copy, RESOURCE_FROM_ANNOTATION),
            Some(NAME),
            "{namespace}"
        );
        assert_eq!(
            annotation(copy, RESOURCE_HASH_ANNOTATION),
            Some(hash.as_str())
        );
        let owners = copy.metadata.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1, "{namespace}: {owners:?}");
        let owner = &owners[0];
        assert_eq!(owner.api_version, "apps.kruise.io/v1alpha1");
        assert_eq!(owner.kind, "ResourceDistribution");
        assert_eq!(owner.name, NAME);
        assert_eq!(Some(&owner.uid), rd.metadata.uid.as_ref());
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert_eq!(copy.data.as_ref().unwrap().len(), 4);
    }
    let all = all_copies(&world.client).await;
    let everywhere: Vec<&str> = all.keys().map(String::as_str).collect();
    assert_eq!(everywhere, ["ns-1", "ns-2", "ns-3", "ns-4", FOREIGN]);
    assert_eq!(
        all[FOREIGN], world.foreign,
        "the foreign ConfigMap was touched"
    );
    assert_eq!(all["ns-3"], world.bystander);
    hash
}

/// The same spec again, a metadata-only change of the distribution and an
/// unrelated namespace change each reconcile, and nothing is written
/// (neither a copy nor the status).
async fn a_no_op_writes_nothing(world: &World) {
    let before = all_copies(&world.client).await;
    let mut same = world.rds.get(NAME).await.unwrap();
    same.metadata.managed_fields = None;
    world
        .rds
        .replace(NAME, &PostParams::default(), &same)
        .await
        .unwrap();
    patch_distribution(
        &world.rds,
        json!({"metadata": {"annotations": {"touched": "yes"}}}),
    )
    .await;
    label_namespace(&world.client, "ns-1", json!({"touched": "yes"})).await;
    let touched = world.rds.get(NAME).await.unwrap();
    assert_eq!(touched.metadata.generation, Some(1));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        resource_versions(&all_copies(&world.client).await),
        resource_versions(&before),
        "a no-op reconcile wrote a copy"
    );
    assert_eq!(
        world.rds.get(NAME).await.unwrap().metadata.resource_version,
        touched.metadata.resource_version,
        "a no-op reconcile wrote the status"
    );
}

/// A change of the resource updates every copy, and only them.
async fn a_resource_change_updates_every_copy(world: &World, old_hash: &str) {
    patch_distribution(
        &world.rds,
        json!({"spec": {"resource": {"data": {"player_initial_lives": "4"}}}}),
    )
    .await;
    let rd = wait_for_status(&world.rds, 4, 3).await;
    assert_eq!(rd.status.as_ref().unwrap().observed_generation, Some(2));
    let updated = wait_for_copies(&world.client, &rd, &["ns-1", "ns-2", "ns-4"]).await;
    assert_ne!(resource_hash(&rd.spec.resource), old_hash);
    for copy in updated.values() {
        assert_eq!(copy.data.as_ref().unwrap()["player_initial_lives"], "4");
    }
    assert_eq!(
        configmaps(&world.client, FOREIGN).get(COPY).await.unwrap(),
        world.foreign
    );
}

async fn a_labelled_namespace_gets_a_copy(world: &World) {
    label_namespace(&world.client, "ns-5", json!({"group": "test"})).await;
    let rd = wait_for_status(&world.rds, 5, 4).await;
    wait_for_copies(&world.client, &rd, &["ns-1", "ns-2", "ns-4", "ns-5"]).await;
}

async fn copies_edited_or_deleted_by_hand_are_restored(world: &World) {
    let rd = world.rds.get(NAME).await.unwrap();
    configmaps(&world.client, "ns-1")
        .patch(
            COPY,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"player_initial_lives": "99"}})),
        )
        .await
        .unwrap();
    configmaps(&world.client, "ns-2")
        .delete(COPY, &DeleteParams::default())
        .await
        .unwrap();
    let restored = wait_for_copies(&world.client, &rd, &["ns-1", "ns-2", "ns-4", "ns-5"]).await;
    assert_eq!(
        restored["ns-1"].data.as_ref().unwrap()["player_initial_lives"],
        "4"
    );
}

/// ns-4 is no longer listed, ns-2 is excluded, ns-5 loses its label: their
/// copies go, the bystander in ns-3 stays.
async fn shrinking_the_targets_deletes_copies(world: &World) {
    patch_distribution(
        &world.rds,
        json!({"spec": {"targets": {
            "includedNamespaces": {"list": [{"name": "ns-1"}]},
            "excludedNamespaces": {"list": [{"name": "ns-3"}, {"name": "ns-2"}]},
        }}}),
    )
    .await;
    let rd = wait_for_status(&world.rds, 3, 2).await;
    wait_for_copies(&world.client, &rd, &["ns-1", "ns-5"]).await;
    label_namespace(&world.client, "ns-5", json!({"group": null})).await;
    let rd = wait_for_status(&world.rds, 2, 1).await;
    wait_for_copies(&world.client, &rd, &["ns-1"]).await;
    assert_eq!(rd.status.as_ref().unwrap().observed_generation, Some(3));
    assert_conditions(
        &rd,
        &[(Type::ConflictOccurred, &[FOREIGN], MESSAGE_CONFLICT)],
    );
    assert_eq!(
        configmaps(&world.client, "ns-3").get(COPY).await.unwrap(),
        world.bystander
    );
}

/// A listed namespace that does not exist counts as desired and fails;
/// once it is created, it gets its copy.
async fn a_missing_namespace_is_reported_then_served(world: &World) {
    patch_distribution(
        &world.rds,
        json!({"spec": {"targets": {"includedNamespaces": {"list": [{"name": "ns-1"}, {"name": "ns-7"}]}}}}),
    )
    .await;
    let rd = wait_for_status(&world.rds, 3, 1).await;
    assert_conditions(
        &rd,
        &[
            (Type::ConflictOccurred, &[FOREIGN], MESSAGE_CONFLICT),
            (
                Type::NamespaceNotExists,
                &["ns-7"],
                MESSAGE_NAMESPACE_NOT_EXISTS,
            ),
        ],
    );
    let conflict_since = condition(&rd, Type::ConflictOccurred)
        .last_transition_time
        .clone();
    create_namespace(&world.client, "ns-7", json!({})).await;
    let rd = wait_for_status(&world.rds, 3, 2).await;
    wait_for_copies(&world.client, &rd, &["ns-1", "ns-7"]).await;
    assert_conditions(
        &rd,
        &[(Type::ConflictOccurred, &[FOREIGN], MESSAGE_CONFLICT)],
    );
    assert_eq!(
        condition(&rd, Type::ConflictOccurred).last_transition_time,
        conflict_since,
        "an unchanged condition keeps its transition time"
    );
}

/// The distribution is cluster-scoped: its events land in `default`.
async fn events_are_published(world: &World) {
    let events: Vec<Event> = Api::<Event>::namespaced(world.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NAME))
        .collect();
    let reasons: BTreeSet<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    for reason in [
        "ResourceCreated",
        "ResourceUpdated",
        "ResourceDeleted",
        "ConflictOccurred",
        "NamespaceNotExists",
    ] {
        assert!(reasons.contains(reason), "no {reason} event in {reasons:?}");
    }
    for event in &events {
        assert_eq!(event.reporting_controller.as_deref(), Some(CONTROLLER_NAME));
        let warning = matches!(
            event.reason.as_deref(),
            Some("ConflictOccurred" | "NamespaceNotExists")
        );
        let expected = if warning { "Warning" } else { "Normal" };
        assert_eq!(event.type_.as_deref(), Some(expected), "{event:?}");
    }
}

/// The foreign ConfigMap's deletion reconciles the distribution (it has its
/// name): its namespace gets a copy and the conflict clears.
async fn the_conflict_clears_when_the_foreign_object_goes(world: &World) {
    assert_eq!(
        configmaps(&world.client, FOREIGN).get(COPY).await.unwrap(),
        world.foreign
    );
    configmaps(&world.client, FOREIGN)
        .delete(COPY, &DeleteParams::default())
        .await
        .unwrap();
    let rd = wait_for_status(&world.rds, 3, 3).await;
    wait_for_copies(&world.client, &rd, &["ns-1", "ns-7", FOREIGN]).await;
    assert_conditions(&rd, &[]);
}

/// The garbage collector deletes the copies with the distribution (owner
/// references); the bystander stays.
async fn deleting_the_distribution_removes_the_copies(world: &World) {
    world
        .rds
        .delete(NAME, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(
        &world.rds,
        NAME,
        "the distribution is deleted",
        Duration::from_mins(1),
    )
    .await;
    for namespace in ["ns-1", "ns-7", FOREIGN] {
        wait_gone(
            &configmaps(&world.client, namespace),
            COPY,
            "the garbage collector deletes the copy",
            // The garbage collector notices a new CRD on its next discovery
            // (every 30 s).
            Duration::from_mins(2),
        )
        .await;
    }
    assert_eq!(
        configmaps(&world.client, "ns-3").get(COPY).await.unwrap(),
        world.bystander
    );
}
