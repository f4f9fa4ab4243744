//! One reconcile of a ResourceDistribution (spec 07 §3): the writes, the
//! conflicts, the status.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::resourcedistribution::ResourceDistributionConditionType as Type;
use kruise_api::{ResourceDistribution, Strictness, object_from_value};
use kruise_core::resourcedistribution::{
    Action, Existing, Failure, MESSAGE_CONFLICT, MESSAGE_NAMESPACE_NOT_EXISTS, NamespaceInfo, Plan,
    PlanError, RESOURCE_FROM_ANNOTATION, RESOURCE_HASH_ANNOTATION, ReconcileInput, ResourceKind,
    desired_copy, is_controlled_by, is_up_to_date, needs_status_write, plan, resource_hash,
};
use serde_json::{Value, json};

const UID: &str = "9d5b3b7e-0000-4000-8000-000000000001";

fn now() -> Timestamp {
    "2026-11-29T12:00:00Z".parse().unwrap()
}

fn later() -> Timestamp {
    "2026-11-29T12:05:00Z".parse().unwrap()
}

/// The seed example (policies/fixtures/examples/resourcedistribution.yaml)
/// as read from the cluster: with a uid and a generation.
fn seed() -> ResourceDistribution {
    let mut value: Value = serde_yaml::from_str(include_str!(
        "../../fixtures/examples/resourcedistribution.yaml"
    ))
    .unwrap();
    value["metadata"]["uid"] = json!(UID);
    value["metadata"]["generation"] = json!(3);
    object_from_value(value, Strictness::Strict).unwrap()
}

fn seed_cluster() -> Vec<NamespaceInfo> {
    vec![
        NamespaceInfo::new("default"),
        NamespaceInfo::new("kube-system").with_label("group", "test"),
        NamespaceInfo::new("ns-1"),
        NamespaceInfo::new("ns-2").with_label("group", "test"),
        NamespaceInfo::new("ns-3").with_label("group", "test"),
        NamespaceInfo::new("ns-4"),
        NamespaceInfo::new("ns-5").with_label("group", "test"),
    ]
}

fn run(
    distribution: &ResourceDistribution,
    namespaces: &[NamespaceInfo],
    existing: &BTreeMap<String, Existing>,
) -> Plan {
    plan(&ReconcileInput {
        distribution,
        namespaces,
        existing,
        now: now(),
    })
    .unwrap()
}

fn created(plan: &Plan) -> Vec<&str> {
    plan.actions
        .iter()
        .filter(|a| matches!(a, Action::Create { .. }))
        .map(Action::namespace)
        .collect()
}

fn updated(plan: &Plan) -> Vec<&str> {
    plan.actions
        .iter()
        .filter(|a| matches!(a, Action::Update { .. }))
        .map(Action::namespace)
        .collect()
}

fn deleted(plan: &Plan) -> Vec<&str> {
    plan.actions
        .iter()
        .filter(|a| matches!(a, Action::Delete { .. }))
        .map(Action::namespace)
        .collect()
}

/// The cluster after the plan ran without failures.
fn apply(plan: &Plan, existing: &mut BTreeMap<String, Existing>) {
    for action in &plan.actions {
        match action {
            Action::Create { namespace, object } | Action::Update { namespace, object } => {
                let mut stored = object.clone();
                stored["metadata"]["resourceVersion"] = json!("7");
                existing.insert(namespace.clone(), Existing::Found(stored));
            }
            Action::Delete { namespace } => {
                existing.remove(namespace);
            }
        }
    }
}

fn with_status(distribution: &ResourceDistribution, plan: &Plan) -> ResourceDistribution {
    let mut next = distribution.clone();
    next.status = Some(plan.status.clone());
    next
}

fn condition(
    status: &kruise_api::resourcedistribution::ResourceDistributionStatus,
    type_: Type,
) -> &kruise_api::resourcedistribution::ResourceDistributionCondition {
    status.conditions.iter().find(|c| c.type_ == type_).unwrap()
}

fn foreign_config_map(namespace: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "game-demo", "namespace": namespace, "resourceVersion": "1",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": "other-uid", "controller": true}]},
        "data": {"mine": "do not touch"}})
}

#[test]
fn the_seed_example_creates_one_copy_per_target() {
    let rd = seed();
    let plan = run(&rd, &seed_cluster(), &BTreeMap::new());
    assert_eq!(created(&plan), ["ns-1", "ns-2", "ns-4", "ns-5"]);
    assert!(plan.failures.is_empty());
    assert_eq!(plan.resource.kind, ResourceKind::ConfigMap);
    assert_eq!(plan.resource.name, "game-demo");
    assert_eq!(plan.hash, resource_hash(&rd.spec.resource));

    let Action::Create { object, .. } = &plan.actions[1] else {
        panic!("a create")
    };
    let hash = resource_hash(&rd.spec.resource);
    assert_eq!(
        object["metadata"],
        json!({
            "name": "game-demo",
            "namespace": "ns-2",
            "annotations": {
                RESOURCE_FROM_ANNOTATION: "sample",
                RESOURCE_HASH_ANNOTATION: hash,
            },
            "ownerReferences": [{
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
                "name": "sample", "uid": UID, "controller": true, "blockOwnerDeletion": true
            }]
        })
    );
    assert_eq!(object["data"], rd.spec.resource["data"]);
    assert_eq!(object["kind"], "ConfigMap");
    assert!(is_controlled_by(object, &rd));

    let status = &plan.status;
    assert_eq!((status.desired, status.succeeded, status.failed), (4, 4, 0));
    assert_eq!(status.observed_generation, Some(3));
    let types: Vec<Type> = status.conditions.iter().map(|c| c.type_).collect();
    assert_eq!(types, Type::ALL);
    for c in &status.conditions {
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some("Succeeded"));
        assert!(c.failed_namespaces.is_empty());
        assert_eq!(c.last_transition_time, Some(Time(now())));
    }
    assert!(!plan.needs_retry(&[]));
}

#[test]
fn a_second_reconcile_of_the_same_hash_writes_nothing() {
    let rd = seed();
    let mut existing = BTreeMap::new();
    let first = run(&rd, &seed_cluster(), &existing);
    apply(&first, &mut existing);
    let rd = with_status(&rd, &first);
    let second = plan(&ReconcileInput {
        distribution: &rd,
        namespaces: &seed_cluster(),
        existing: &existing,
        now: later(),
    })
    .unwrap();
    assert!(second.actions.is_empty(), "{:?}", second.actions);
    assert_eq!(second.up_to_date, ["ns-1", "ns-2", "ns-4", "ns-5"]);
    assert_eq!(second.status, first.status, "times are kept");
    assert!(!needs_status_write(&rd, &second.status));
}

#[test]
fn a_changed_resource_updates_every_copy_and_keeps_what_others_added() {
    let rd = seed();
    let mut existing = BTreeMap::new();
    apply(&run(&rd, &seed_cluster(), &existing), &mut existing);
    // Someone labelled one copy and put a finalizer on it.
    if let Some(Existing::Found(copy)) = existing.get_mut("ns-2") {
        copy["metadata"]["labels"] = json!({"team": "a"});
        copy["metadata"]["finalizers"] = json!(["example.com/keep"]);
        copy["metadata"]["annotations"]["note"] = json!("kept");
    }
    let mut changed = rd.clone();
    changed.spec.resource["data"]["player_initial_lives"] = json!("4");
    let plan = run(&changed, &seed_cluster(), &existing);
    assert_eq!(updated(&plan), ["ns-1", "ns-2", "ns-4", "ns-5"]);
    let Some(Action::Update { object, .. }) = plan.action_for("ns-2") else {
        panic!("an update")
    };
    assert_eq!(object["data"]["player_initial_lives"], "4");
    let metadata = &object["metadata"];
    assert_eq!(metadata["labels"], json!({"team": "a"}));
    assert_eq!(metadata["finalizers"], json!(["example.com/keep"]));
    assert_eq!(metadata["annotations"]["note"], "kept");
    assert_eq!(
        metadata["annotations"][RESOURCE_HASH_ANNOTATION],
        resource_hash(&changed.spec.resource)
    );
    assert_eq!(metadata["resourceVersion"], "7");
    assert_eq!(metadata["ownerReferences"].as_array().unwrap().len(), 1);
    assert_eq!(plan.status.succeeded, 4);
}

#[test]
fn a_change_to_only_the_resources_metadata_does_not_rewrite_copies() {
    let rd = seed();
    let mut existing = BTreeMap::new();
    apply(&run(&rd, &seed_cluster(), &existing), &mut existing);
    let mut relabelled = rd.clone();
    relabelled.spec.resource["metadata"]["labels"] = json!({"new": "label"});
    let plan = run(&relabelled, &seed_cluster(), &existing);
    assert!(plan.actions.is_empty(), "spec 07 §3: metadata is ignored");
    // A new target gets the new labels, though.
    let mut cluster = seed_cluster();
    cluster.push(NamespaceInfo::new("ns-6").with_label("group", "test"));
    let plan = run(&relabelled, &cluster, &existing);
    let Some(Action::Create { object, .. }) = plan.action_for("ns-6") else {
        panic!("a create")
    };
    assert_eq!(object["metadata"]["labels"], json!({"new": "label"}));
}

#[test]
fn a_copy_edited_by_hand_is_restored() {
    let rd = seed();
    let mut existing = BTreeMap::new();
    apply(&run(&rd, &seed_cluster(), &existing), &mut existing);
    if let Some(Existing::Found(copy)) = existing.get_mut("ns-5") {
        copy["data"]["player_initial_lives"] = json!("99");
    }
    existing.remove("ns-1");
    let plan = run(&rd, &seed_cluster(), &existing);
    assert_eq!(updated(&plan), ["ns-5"]);
    assert_eq!(created(&plan), ["ns-1"], "a deleted copy is recreated");
}

#[test]
fn shrinking_the_targets_deletes_only_the_copies_this_distribution_controls() {
    let rd = seed();
    let mut existing = BTreeMap::new();
    apply(&run(&rd, &seed_cluster(), &existing), &mut existing);
    // ns-2 loses its label, ns-4 leaves the list; ns-3 (excluded) holds a
    // foreign ConfigMap of the same name.
    let mut cluster = seed_cluster();
    cluster[3] = NamespaceInfo::new("ns-2");
    let mut shrunk = rd.clone();
    shrunk.spec.targets.included_namespaces =
        serde_json::from_value(json!({"list": [{"name": "ns-1"}]})).unwrap();
    existing.insert(
        "ns-3".to_owned(),
        Existing::Found(foreign_config_map("ns-3")),
    );
    let plan = run(&shrunk, &cluster, &existing);
    assert_eq!(deleted(&plan), ["ns-2", "ns-4"]);
    assert!(created(&plan).is_empty() && updated(&plan).is_empty());
    assert_eq!((plan.status.desired, plan.status.succeeded), (2, 2));
    // A terminating namespace is left to the namespace controller.
    cluster[5] = NamespaceInfo::new("ns-4").terminating();
    let plan = run(&shrunk, &cluster, &existing);
    assert_eq!(deleted(&plan), ["ns-2"]);
}

#[test]
fn a_foreign_object_of_the_same_name_is_a_conflict_and_left_untouched() {
    let rd = seed();
    let mut existing = BTreeMap::new();
    existing.insert(
        "ns-4".to_owned(),
        Existing::Found(foreign_config_map("ns-4")),
    );
    let plan = run(&rd, &seed_cluster(), &existing);
    assert_eq!(created(&plan), ["ns-1", "ns-2", "ns-5"]);
    assert!(plan.action_for("ns-4").is_none(), "never overwritten");
    assert_eq!(
        plan.failures,
        [Failure {
            namespace: "ns-4".to_owned(),
            condition: Type::ConflictOccurred,
            message: MESSAGE_CONFLICT.to_owned()
        }]
    );
    let status = &plan.status;
    assert_eq!((status.desired, status.succeeded, status.failed), (4, 3, 1));
    let conflict = condition(status, Type::ConflictOccurred);
    assert_eq!(conflict.status, "True");
    assert_eq!(conflict.reason.as_deref(), Some(MESSAGE_CONFLICT));
    assert_eq!(conflict.failed_namespaces, ["ns-4"]);
    assert!(!plan.needs_retry(&[]), "a conflict waits for an event");
    // Unowned (no owner at all) is a conflict too, and is not deleted
    // when the namespace leaves the targets.
    let mut bare = foreign_config_map("ns-4");
    bare["metadata"]["ownerReferences"] = json!([]);
    existing.insert("ns-4".to_owned(), Existing::Found(bare));
    assert_eq!(run(&rd, &seed_cluster(), &existing).failures.len(), 1);
    let mut shrunk = rd.clone();
    shrunk.spec.targets.included_namespaces = None;
    assert!(
        run(&shrunk, &seed_cluster(), &existing)
            .action_for("ns-4")
            .is_none()
    );
}

#[test]
fn a_copy_that_lost_its_controller_reference_becomes_a_conflict() {
    let rd = seed();
    let mut existing = BTreeMap::new();
    apply(&run(&rd, &seed_cluster(), &existing), &mut existing);
    if let Some(Existing::Found(copy)) = existing.get_mut("ns-1") {
        copy["metadata"]["ownerReferences"][0]["controller"] = json!(false);
    }
    let plan = run(&rd, &seed_cluster(), &existing);
    assert_eq!(plan.failures[0].condition, Type::ConflictOccurred);
    assert_eq!(plan.failures[0].namespace, "ns-1");
}

#[test]
fn missing_and_terminating_targets_are_reported() {
    let rd = seed();
    let mut cluster = seed_cluster();
    cluster.retain(|ns| ns.name != "ns-4");
    cluster[2] = NamespaceInfo::new("ns-1").terminating();
    let plan = run(&rd, &cluster, &BTreeMap::new());
    assert_eq!(created(&plan), ["ns-2", "ns-5"]);
    let missing = condition(&plan.status, Type::NamespaceNotExists);
    assert_eq!(missing.status, "True");
    assert_eq!(missing.failed_namespaces, ["ns-1", "ns-4"]);
    assert_eq!(
        missing.reason.as_deref(),
        Some(MESSAGE_NAMESPACE_NOT_EXISTS)
    );
    assert_eq!(
        (
            plan.status.desired,
            plan.status.succeeded,
            plan.status.failed
        ),
        (4, 2, 2)
    );
    assert!(!plan.needs_retry(&[]));
}

#[test]
fn read_and_write_failures_are_reported_and_retried() {
    let rd = seed();
    let mut existing = BTreeMap::new();
    existing.insert(
        "ns-5".to_owned(),
        Existing::ReadFailed("etcd timeout".to_owned()),
    );
    existing.insert(
        "default".to_owned(),
        Existing::ReadFailed("forbidden".to_owned()),
    );
    let plan = run(&rd, &seed_cluster(), &existing);
    assert_eq!(created(&plan), ["ns-1", "ns-2", "ns-4"]);
    let get = condition(&plan.status, Type::GetResourceFailed);
    assert_eq!(get.failed_namespaces, ["default", "ns-5"]);
    assert_eq!(
        get.reason.as_deref(),
        Some("etcd timeout"),
        "the last failure's text"
    );
    assert_eq!(
        (plan.status.succeeded, plan.status.failed),
        (3, 1),
        "default is no target"
    );
    assert!(plan.needs_retry(&[]));

    let failures = vec![
        plan.action_for("ns-1").unwrap().failed("quota exceeded"),
        plan.action_for("ns-4").unwrap().failed("admission denied"),
    ];
    let status = plan.status_after(&rd, &failures, now());
    let create = condition(&status, Type::CreateResourceFailed);
    assert_eq!(create.status, "True");
    assert_eq!(create.failed_namespaces, ["ns-1", "ns-4"]);
    assert_eq!(create.reason.as_deref(), Some("admission denied"));
    assert_eq!((status.desired, status.succeeded, status.failed), (4, 1, 3));
}

#[test]
fn a_failed_delete_does_not_count_against_the_targets() {
    let rd = seed();
    let mut existing = BTreeMap::new();
    apply(&run(&rd, &seed_cluster(), &existing), &mut existing);
    let mut shrunk = rd.clone();
    shrunk.spec.targets.included_namespaces = None;
    let plan = run(&shrunk, &seed_cluster(), &existing);
    assert_eq!(deleted(&plan), ["ns-1", "ns-4"]);
    let failures = [plan.actions[0].failed("conflict")];
    assert_eq!(failures[0].condition, Type::DeleteResourceFailed);
    let status = plan.status_after(&shrunk, &failures, now());
    assert_eq!((status.desired, status.succeeded, status.failed), (2, 2, 0));
    assert_eq!(
        condition(&status, Type::DeleteResourceFailed).failed_namespaces,
        ["ns-1"]
    );
    assert!(plan.needs_retry(&failures));
}

#[test]
fn transition_times_move_only_when_a_condition_flips() {
    let rd = seed();
    let first = run(&rd, &seed_cluster(), &BTreeMap::new());
    let rd = with_status(&rd, &first);
    let mut existing = BTreeMap::new();
    existing.insert(
        "ns-1".to_owned(),
        Existing::Found(foreign_config_map("ns-1")),
    );
    let second = plan(&ReconcileInput {
        distribution: &rd,
        namespaces: &seed_cluster(),
        existing: &existing,
        now: later(),
    })
    .unwrap();
    for c in &second.status.conditions {
        let expected = if c.type_ == Type::ConflictOccurred {
            later()
        } else {
            now()
        };
        assert_eq!(
            c.last_transition_time,
            Some(Time(expected)),
            "{:?}",
            c.type_
        );
    }
    assert!(needs_status_write(&rd, &second.status));
}

#[test]
fn the_spec_example_reconciles_as_upstream_do_reconcile() {
    let rd: ResourceDistribution = object_from_value(
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
            "metadata": {"name": "test-resource-distribution", "uid": UID, "generation": 1},
            "spec": {
                "resource": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "test-secret-1"},
                    "type": "Opaque", "data": {"test": "dGVzdA=="}},
                "targets": {
                    "includedNamespaces": {"list": [{"name": "ns-1"}, {"name": "ns-3"}, {"name": "ns-5"}]},
                    "namespaceLabelSelector": {"matchLabels": {"group": "one"}},
                    "excludedNamespaces": {"list": [{"name": "ns-4"}]}
                }
            }
        }),
        Strictness::Strict,
    )
    .unwrap();
    let cluster = vec![
        NamespaceInfo::new("ns-1").with_label("group", "one"),
        NamespaceInfo::new("ns-2").with_label("group", "one"),
        NamespaceInfo::new("ns-3").with_label("group", "two"),
        NamespaceInfo::new("ns-4").with_label("group", "one"),
        NamespaceInfo::new("ns-5").with_label("group", "two"),
    ];
    let mut existing = BTreeMap::new();
    existing.insert(
        "ns-4".to_owned(),
        Existing::Found(desired_copy(&rd, "ns-4").unwrap()),
    );
    let plan = run(&rd, &cluster, &existing);
    assert_eq!(created(&plan), ["ns-1", "ns-2", "ns-3", "ns-5"]);
    assert_eq!(deleted(&plan), ["ns-4"]);
    assert_eq!(plan.status.desired, 4);
    assert_eq!(plan.status.conditions.len(), 6);
    assert_eq!(
        plan.hash,
        "d32b7db4c8b12d4cc03ca0d9b3e89a9b501490dbb34f1c77ac858eab0818d8b7"
    );
}

#[test]
fn ownership_is_by_uid_across_api_versions_else_by_kind_and_name() {
    let rd = seed();
    let owned_by = |reference: Value| json!({"metadata": {"ownerReferences": [reference]}});
    let beta = owned_by(
        json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "ResourceDistribution",
        "name": "renamed", "uid": UID, "controller": true}),
    );
    assert!(is_controlled_by(&beta, &rd), "the uid decides");
    let other_uid = owned_by(
        json!({"kind": "ResourceDistribution", "name": "sample", "uid": "x", "controller": true}),
    );
    assert!(!is_controlled_by(&other_uid, &rd));
    let no_uid =
        owned_by(json!({"kind": "ResourceDistribution", "name": "sample", "controller": true}));
    assert!(
        is_controlled_by(&no_uid, &rd),
        "kind and name without a uid"
    );
    let not_controller =
        owned_by(json!({"kind": "ResourceDistribution", "name": "sample", "uid": UID}));
    assert!(!is_controlled_by(&not_controller, &rd));
    assert!(!is_controlled_by(&json!({"metadata": {}}), &rd));
    assert!(!is_controlled_by(&json!("garbage"), &rd));
}

#[test]
fn secrets_compare_as_the_api_server_stores_them() {
    let resource = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "stringData": {"password": "test"}, "data": {"user": "dQ=="}});
    let stored = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "uid": "u"},
        "type": "Opaque", "data": {"user": "dQ==", "password": "dGVzdA=="}});
    assert!(is_up_to_date(&stored, &resource));
    let mut changed = stored.clone();
    changed["data"]["password"] = json!("eA==");
    assert!(!is_up_to_date(&changed, &resource));
    let empty_cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}});
    assert!(is_up_to_date(
        &json!({"kind": "ConfigMap", "metadata": {}}),
        &empty_cm
    ));
}

#[test]
fn what_cannot_be_planned_says_why() {
    let mut rd = seed();
    rd.spec.resource =
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}});
    let error = plan(&ReconcileInput {
        distribution: &rd,
        namespaces: &seed_cluster(),
        existing: &BTreeMap::new(),
        now: now(),
    })
    .unwrap_err();
    assert!(matches!(error, PlanError::InvalidResource(_)), "{error}");
    assert!(
        error
            .to_string()
            .contains("unsupported resource apps/v1 Deployment")
    );

    let mut rd = seed();
    rd.metadata.uid = None;
    assert_eq!(desired_copy(&rd, "ns-1").unwrap_err(), PlanError::NoUid);

    let mut rd = seed();
    rd.spec.targets.namespace_label_selector =
        serde_json::from_value(json!({"matchExpressions": [{"key": "a", "operator": "Nope"}]}))
            .unwrap();
    let error = plan(&ReconcileInput {
        distribution: &rd,
        namespaces: &seed_cluster(),
        existing: &BTreeMap::new(),
        now: now(),
    })
    .unwrap_err();
    assert!(matches!(error, PlanError::InvalidSelector(_)), "{error}");
}

#[test]
fn copies_drop_server_fields_and_keep_the_resources_own_metadata() {
    let mut rd = seed();
    rd.spec.resource["metadata"] = json!({"name": "game-demo", "namespace": "elsewhere", "uid": "old",
        "creationTimestamp": "2020-01-01T00:00:00Z", "labels": {"app": "game"},
        "annotations": {"note": "x", RESOURCE_FROM_ANNOTATION: "spoofed"}});
    let copy = desired_copy(&rd, "ns-1").unwrap();
    let metadata = &copy["metadata"];
    assert_eq!(metadata["namespace"], "ns-1");
    assert_eq!(metadata["labels"], json!({"app": "game"}));
    assert_eq!(metadata["annotations"]["note"], "x");
    assert_eq!(metadata["annotations"][RESOURCE_FROM_ANNOTATION], "sample");
    assert!(metadata.get("uid").is_none() && metadata.get("creationTimestamp").is_none());
}
