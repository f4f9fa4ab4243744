//! SidecarSet revision history (spec 02 §6): the upstream cases
//! `TestGetActiveRevisions`, `TestReplaceRevision` and `TestTruncateHistory`
//! (`sidecarset_processor_test.go`) against the pure revision planner.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod sidecarset_update_common;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Container, LocalObjectReference, Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruise_api::SidecarSet;
use kruise_api::sidecarset::{
    SidecarContainer, SidecarSetInjectRevision, SidecarSetInjectionStrategy,
};
use kruise_core::sidecarset::HASH_ANNOTATION;
use kruise_core::sidecarset::update::{
    CUSTOM_VERSION_LABEL, RevisionWrite, active_revisions, plan_revisions, replace_revision,
};
use sidecarset_update_common::{SET, cold, cold_pod, sidecar_set};

const NS: &str = "kruise-system";

/// A cluster holding revisions: apply a plan's writes and deletions.
fn register(
    set: &SidecarSet,
    store: &mut Vec<ControllerRevision>,
    pods: &[&Pod],
) -> ControllerRevision {
    let plan = plan_revisions(set, store, pods, NS);
    match plan.write {
        RevisionWrite::None => {}
        RevisionWrite::Bump { name, revision } => {
            let stored = store
                .iter_mut()
                .find(|r| r.metadata.name.as_deref() == Some(&name))
                .unwrap();
            stored.revision = Some(revision);
        }
        RevisionWrite::Create(revision) => store.push(*revision),
    }
    store.retain(|r| !plan.delete.contains(r.metadata.name.as_ref().unwrap()));
    plan.latest
}

fn base_set() -> SidecarSet {
    let mut set = sidecar_set(
        vec![cold("test-sidecar", "test-image:v2")],
        "bbb",
        "without-aaa",
    );
    set.spec.revision_history_limit = Some(10);
    set
}

#[test]
fn get_active_revisions_create_update_rollback_limit() {
    let mut set = base_set();
    let mut store = Vec::new();

    // Case 1: create.
    let latest = register(&set, &mut store, &[]);
    assert_eq!(latest.revision, Some(1));
    assert!(
        latest
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with(&format!("{SET}-"))
    );
    assert_eq!(latest.metadata.namespace.as_deref(), Some(NS));
    let labels = latest.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kruise.io/sidecarset-name"], SET);
    assert_eq!(
        latest.metadata.annotations.as_ref().unwrap()[HASH_ANNOTATION],
        "bbb"
    );

    // Case 2: an update (fields outside the hash) is a new revision, once.
    let mut updated = set.clone();
    updated.spec.init_containers = vec![SidecarContainer {
        container: Container {
            name: "emptyInitC".to_owned(),
            ..Default::default()
        },
        ..Default::default()
    }];
    updated.spec.volumes = vec![Volume {
        name: "emptyVolume".to_owned(),
        ..Default::default()
    }];
    updated.spec.image_pull_secrets = vec![LocalObjectReference {
        name: "emptySecret".to_owned(),
    }];
    for _ in 0..5 {
        let latest = register(&updated, &mut store, &[]);
        assert_eq!(latest.revision, Some(2));
        let spec = &latest.data.0["spec"];
        for key in [
            "volumes",
            "containers",
            "initContainers",
            "imagePullSecrets",
        ] {
            assert!(!spec[key].is_null(), "{key}");
        }
        assert_eq!(spec["$patch"], "replace");
        assert!(spec["patchPodMetadata"].is_null());
    }
    assert_eq!(store.len(), 2);

    // Case 3: back to the first spec is a rollback: revision 1 becomes 3.
    let first_name = store[0].metadata.name.clone();
    for _ in 0..5 {
        let latest = register(&set, &mut store, &[]);
        assert_eq!(latest.revision, Some(3));
        assert_eq!(latest.metadata.name, first_name);
    }
    assert_eq!(store.len(), 2);

    // Case 4: at most revisionHistoryLimit revisions are kept.
    for i in 0..100 {
        set.spec.containers[0].container.image = Some(i.to_string());
        register(&set, &mut store, &[]);
    }
    assert_eq!(store.len(), 10);
}

#[test]
fn custom_version_label_is_put_on_the_latest_revision() {
    let mut set = base_set();
    let mut store = Vec::new();
    register(&set, &mut store, &[]);
    set.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(CUSTOM_VERSION_LABEL.to_owned(), "v1".to_owned());
    let plan = plan_revisions(&set, &store, &[], NS);
    assert_eq!(plan.write, RevisionWrite::None);
    assert_eq!(plan.custom_version_label.as_deref(), Some("v1"));
}

fn revision(i: i64) -> ControllerRevision {
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("sidecar-{i}")),
            namespace: Some(NS.to_owned()),
            ..Default::default()
        },
        revision: Some(i),
        ..Default::default()
    }
}

#[test]
fn replace_revision_keeps_the_order() {
    const TOTAL: i64 = 10;
    let pick: Vec<ControllerRevision> = (1..=TOTAL).map(revision).collect();
    for i in 0..pick.len() {
        let mut revisions = pick.clone();
        replace_revision(&mut revisions, i, revision(TOTAL + 1));
        assert_eq!(revisions.len(), pick.len());
        assert!(
            revisions.windows(2).all(|w| w[0].revision < w[1].revision),
            "replacing item {i}"
        );
    }
}

#[test]
fn truncate_history_respects_revisions_in_use() {
    let mut set = base_set();
    set.metadata.name = Some("sidecar".to_owned());
    // 15 stored revisions; the SidecarSet's own spec is none of them, so
    // registering adds revision 16 which is the newest and never deleted.
    let stored: Vec<ControllerRevision> = (1..=15).map(revision).collect();
    let pods_using = |used: usize| -> Vec<Pod> {
        (0..100)
            .map(|i| {
                let mut pod = cold_pod(&format!("pod-{i}"), "test-image:v1", "aaa");
                pod.metadata.annotations.as_mut().unwrap().insert(
                    HASH_ANNOTATION.to_owned(),
                    format!(
                        r#"{{"sidecar":{{"hash":"aaa","controllerRevision":"sidecar-{}"}}}}"#,
                        i % used + 1
                    ),
                );
                pod
            })
            .collect()
    };

    for used in 1..=9 {
        let pods = pods_using(used);
        let refs: Vec<&Pod> = pods.iter().collect();
        let plan = plan_revisions(&set, &stored, &refs, NS);
        assert_eq!(plan.delete.len(), 6, "used {used}");
        assert_eq!(plan.truncate_error, None, "used {used}");
    }
    // 16 revisions, limit 10: with `used` revisions in use (plus the newest)
    // at most 15 - used can go.
    for (used, actual) in [(10, 11), (11, 12), (14, 15), (15, 16), (20, 16)] {
        let pods = pods_using(used);
        let refs: Vec<&Pod> = pods.iter().collect();
        let plan = plan_revisions(&set, &stored, &refs, NS);
        assert_eq!(
            plan.truncate_error.as_deref(),
            Some(
                format!(
                    "failed to limit the number of stored revisions, limited: 10, actual: {actual}, name: sidecar"
                )
                .as_str()
            ),
            "used {used}"
        );
    }

    // Exactly which are deleted: the oldest unused ones.
    let pods = pods_using(8);
    let refs: Vec<&Pod> = pods.iter().collect();
    let plan = plan_revisions(&set, &stored, &refs, NS);
    let expected: Vec<String> = (9..=14).map(|i| format!("sidecar-{i}")).collect();
    assert_eq!(plan.delete, expected);
}

#[test]
fn pinned_injection_revisions_are_active() {
    let mut set = base_set();
    let mut stored: Vec<ControllerRevision> = (1..=4).map(revision).collect();
    for (i, r) in stored.iter_mut().enumerate() {
        if i < 3 {
            r.metadata.labels = Some([(CUSTOM_VERSION_LABEL.to_owned(), "v1".to_owned())].into());
        }
    }
    set.spec.injection_strategy = Some(SidecarSetInjectionStrategy {
        paused: false,
        revision: Some(SidecarSetInjectRevision {
            custom_version: Some("v1".to_owned()),
            revision_name: Some("sidecar-1".to_owned()),
            policy: None,
        }),
    });
    let active = active_revisions(&set, &stored, &[]);
    assert_eq!(
        active.into_iter().collect::<Vec<_>>(),
        vec!["sidecar-1".to_owned(), "sidecar-3".to_owned()]
    );
}
