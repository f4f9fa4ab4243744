//! Builders and a tiny kubelet for the SidecarSet update planner tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kruise_api::SidecarSet;
use kruise_api::sidecarset::{
    SidecarContainer, SidecarContainerUpgradeStrategy, SidecarSetSpec, SidecarSetUpdateStrategy,
    UpgradeType,
};
use kruise_core::sidecarset::update::{
    INPLACE_UPDATE_STATE_ANNOTATION, PodChange, UpdateInput, UpdatePlan, plan_update,
};
use kruise_core::sidecarset::{
    HASH_ANNOTATION, HASH_WITHOUT_IMAGE_ANNOTATION, INJECTED_LIST_ANNOTATION,
    WORKING_HOT_UPGRADE_ANNOTATION,
};

pub const SET: &str = "test-sidecarset";
pub const EMPTY: &str = "hotupgrade:empty";

pub fn now() -> Timestamp {
    "2026-01-02T03:04:05Z".parse().unwrap()
}

pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// What kubelet reports as the imageID of an image.
pub fn image_id(image: &str) -> String {
    format!("docker-pullable://{image}@sha256:{:0>8}", image.len())
}

pub fn cold(name: &str, image: &str) -> SidecarContainer {
    SidecarContainer {
        container: Container {
            name: name.to_owned(),
            image: Some(image.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    }
}

pub fn hot(name: &str, image: &str) -> SidecarContainer {
    SidecarContainer {
        upgrade_strategy: Some(SidecarContainerUpgradeStrategy {
            upgrade_type: Some(UpgradeType::HotUpgrade),
            hot_upgrade_empty_image: Some(EMPTY.to_owned()),
        }),
        ..cold(name, image)
    }
}

/// A stored SidecarSet selecting `app=sidecar`, with the given hashes.
pub fn sidecar_set(
    containers: Vec<SidecarContainer>,
    hash: &str,
    without_image: &str,
) -> SidecarSet {
    let mut set = SidecarSet::new(
        SET,
        SidecarSetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(map(&[("app", "sidecar")])),
                ..Default::default()
            }),
            containers,
            update_strategy: Some(SidecarSetUpdateStrategy::default()),
            ..Default::default()
        },
    );
    set.metadata.annotations = Some(map(&[
        (HASH_ANNOTATION, hash),
        (HASH_WITHOUT_IMAGE_ANNOTATION, without_image),
    ]));
    set.metadata.generation = Some(123);
    set.metadata.resource_version = Some("22".to_owned());
    set
}

pub fn strategy(set: &mut SidecarSet) -> &mut SidecarSetUpdateStrategy {
    set.spec
        .update_strategy
        .get_or_insert_with(Default::default)
}

pub fn ready_status(name: &str, image: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.to_owned(),
        image: image.to_owned(),
        image_id: image_id(image),
        ready: true,
        ..Default::default()
    }
}

/// A running, ready pod labelled `app=sidecar`, injected by SET at `hash` /
/// `without_image`, with the given containers (name, image) all running.
pub fn pod(name: &str, containers: &[(&str, &str)], hash: &str, without_image: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            labels: Some(map(&[("app", "sidecar")])),
            annotations: Some(map(&[
                (
                    HASH_ANNOTATION,
                    &format!(r#"{{"{SET}":{{"hash":"{hash}","sidecarList":["test-sidecar"]}}}}"#),
                ),
                (
                    HASH_WITHOUT_IMAGE_ANNOTATION,
                    &format!(
                        r#"{{"{SET}":{{"hash":"{without_image}","sidecarList":["test-sidecar"]}}}}"#
                    ),
                ),
                (INJECTED_LIST_ANNOTATION, SET),
            ])),
            resource_version: Some("1".to_owned()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: containers
                .iter()
                .map(|(n, i)| Container {
                    name: (*n).to_owned(),
                    image: Some((*i).to_owned()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".to_owned()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                ..Default::default()
            }]),
            container_statuses: Some(containers.iter().map(|(n, i)| ready_status(n, i)).collect()),
            ..Default::default()
        }),
    }
}

/// A cold-sidecar pod: `nginx` + `test-sidecar` at `image`.
pub fn cold_pod(name: &str, image: &str, hash: &str) -> Pod {
    pod(
        name,
        &[("nginx", "nginx:1.15.1"), ("test-sidecar", image)],
        hash,
        "without-aaa",
    )
}

/// A hot-sidecar pod: `nginx`, `test-sidecar-1` working at `image`,
/// `test-sidecar-2` idle on the empty image.
pub fn hot_pod(name: &str, image: &str, hash: &str, without_image: &str) -> Pod {
    let mut pod = pod(
        name,
        &[
            ("nginx", "nginx:1.15.1"),
            ("test-sidecar-1", image),
            ("test-sidecar-2", EMPTY),
        ],
        hash,
        without_image,
    );
    let annotations = pod.metadata.annotations.as_mut().unwrap();
    annotations.insert(
        WORKING_HOT_UPGRADE_ANNOTATION.to_owned(),
        r#"{"test-sidecar":"test-sidecar-1"}"#.to_owned(),
    );
    annotations.insert(
        "version.sidecarset.kruise.io/test-sidecar-1".to_owned(),
        "1".to_owned(),
    );
    annotations.insert(
        "versionalt.sidecarset.kruise.io/test-sidecar-1".to_owned(),
        "0".to_owned(),
    );
    annotations.insert(
        "version.sidecarset.kruise.io/test-sidecar-2".to_owned(),
        "0".to_owned(),
    );
    annotations.insert(
        "versionalt.sidecarset.kruise.io/test-sidecar-2".to_owned(),
        "1".to_owned(),
    );
    pod
}

pub fn set_created(pod: &mut Pod, second: i64) {
    pod.metadata.creation_timestamp = Some(Time(Timestamp::from_second(second).unwrap()));
}

pub fn set_ready(pod: &mut Pod, ready: bool) {
    let status = pod.status.as_mut().unwrap();
    for condition in status.conditions.iter_mut().flatten() {
        if condition.type_ == "Ready" {
            let status = if ready { "True" } else { "False" };
            status.clone_into(&mut condition.status);
        }
    }
}

pub fn spec_image<'a>(pod: &'a Pod, container: &str) -> &'a str {
    pod.spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .find(|c| c.name == container)
        .and_then(|c| c.image.as_deref())
        .unwrap_or_default()
}

pub fn container_status<'a>(pod: &'a Pod, container: &str) -> &'a ContainerStatus {
    pod.status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()
        .iter()
        .find(|s| s.name == container)
        .unwrap()
}

pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The hash SET's record in the pod names.
pub fn recorded_hash(pod: &Pod) -> String {
    let records: serde_json::Value =
        serde_json::from_str(annotation(pod, HASH_ANNOTATION).unwrap()).unwrap();
    records[SET]["hash"].as_str().unwrap().to_owned()
}

/// Kubelet restarts `container` with its spec image: the status reports the
/// new image and imageID, one more restart, ready.
pub fn restart(pod: &mut Pod, container: &str) {
    let image = spec_image(pod, container).to_owned();
    let status = pod.status.as_mut().unwrap();
    for s in status.container_statuses.iter_mut().flatten() {
        if s.name == container {
            s.image.clone_from(&image);
            s.image_id = image_id(&image);
            s.restart_count += 1;
            s.ready = true;
        }
    }
}

/// Kubelet catches up with every changed container.
pub fn kubelet_sync(pod: &mut Pod) {
    let stale: Vec<String> = pod
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .filter(|c| c.image.as_deref() != Some(container_status(pod, &c.name).image.as_str()))
        .map(|c| c.name.clone())
        .collect();
    for name in stale {
        restart(pod, &name);
    }
}

/// Apply every change of the plan to the pods it names, bumping the
/// resourceVersion as the API server would.
pub fn apply(plan: &UpdatePlan, pods: &mut [Pod]) {
    for change in &plan.pod_changes {
        apply_change(change, pods);
    }
}

pub fn apply_change(change: &PodChange, pods: &mut [Pod]) {
    let pod = pods
        .iter_mut()
        .find(|p| p.metadata.name.as_deref() == Some(change.pod.name.as_str()))
        .unwrap();
    assert_eq!(pod.metadata.resource_version, change.resource_version);
    change.apply(pod);
    let version: u64 = pod
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    pod.metadata.resource_version = Some((version + 1).to_string());
    if let Some(condition) = &change.upgradable_condition {
        let conditions = pod
            .status
            .as_mut()
            .unwrap()
            .conditions
            .get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != condition.type_);
        conditions.push(condition.clone());
    }
}

/// One reconcile round over `pods` with the latest revision `SET-rev`.
pub fn round(set: &SidecarSet, pods: &[Pod]) -> UpdatePlan {
    let namespaces = BTreeMap::new();
    let pods: Vec<&Pod> = pods.iter().collect();
    plan_update(&UpdateInput {
        sidecar_set: set,
        pods: &pods,
        namespace_labels: &namespaces,
        latest_revision: "test-sidecarset-rev",
        collision_count: Some(0),
        expectations: &[],
        now: now(),
    })
    .unwrap()
}

/// `[matched, updated, ready, updatedReady]`.
pub fn counts(plan: &UpdatePlan) -> [i32; 4] {
    let s = &plan.status;
    [
        s.matched_pods,
        s.updated_pods,
        s.ready_pods,
        s.updated_ready_pods,
    ]
}

/// The upstream in-place state after an upgrade recorded `container` at `image`.
pub fn record_in_place(pod: &mut Pod, hash: &str, container: &str, old_image: &str) {
    let state = format!(
        r#"{{"{SET}":{{"revision":"{hash}","updateTimestamp":"2026-01-01T00:00:00Z","lastContainerStatuses":{{"{container}":{{"imageID":"{}"}}}}}}}}"#,
        image_id(old_image)
    );
    pod.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(INPLACE_UPDATE_STATE_ANNOTATION.to_owned(), state);
}

/// A deterministic shuffle.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    for i in (1..items.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = usize::try_from(state >> 33).unwrap() % (i + 1);
        items.swap(i, j);
    }
}

pub fn set_pod_ready(pod: &mut Pod) {
    let all_ready = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .iter()
        .flatten()
        .all(|s| s.ready);
    let status = if all_ready { "True" } else { "False" };
    for condition in pod.status.as_mut().unwrap().conditions.iter_mut().flatten() {
        if condition.type_ == "Ready" {
            status.clone_into(&mut condition.status);
        }
    }
}

/// One kubelet tick: containers that restarted last tick turn ready; then
/// containers whose spec image changed restart (new image and imageID, one
/// more restart, not ready yet). The pod is Ready when all containers are.
pub fn kubelet_tick(pod: &mut Pod) {
    let spec: BTreeMap<String, String> = pod
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect();
    for status in pod
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .iter_mut()
        .flatten()
    {
        if !status.ready {
            status.ready = true;
        } else if spec[&status.name] != status.image {
            status.image.clone_from(&spec[&status.name]);
            status.image_id = image_id(&status.image);
            status.restart_count += 1;
            status.ready = false;
        }
    }
    set_pod_ready(pod);
}
