//! What the update planner reads off a pod (spec 02 §3 step 1, §4, §8):
//! the SidecarSet's hash records, which pods it owns, the hot-upgrade
//! twins, readiness and state consistency.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use kruise_api::SidecarSet;
use kruise_api::sidecarset::SidecarContainer;

use super::UpdateError;
pub(super) use crate::sidecarset::annotations::HashRecord;
use crate::sidecarset::annotations::parse_records;
use crate::sidecarset::matching;
use crate::sidecarset::{
    HASH_ANNOTATION, HASH_WITHOUT_IMAGE_ANNOTATION, INJECTED_LIST_ANNOTATION,
    WORKING_HOT_UPGRADE_ANNOTATION, is_active, sidecar_set_name,
};

pub(super) fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

pub(super) fn own_annotation<'a>(sidecar_set: &'a SidecarSet, key: &str) -> &'a str {
    sidecar_set
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map_or("", String::as_str)
}

/// The SidecarSet's current hash (`kruise.io/sidecarset-hash`).
pub(super) fn sidecar_set_hash(sidecar_set: &SidecarSet) -> &str {
    own_annotation(sidecar_set, HASH_ANNOTATION)
}

/// The pod's records under `key`, in the current or the legacy
/// `{"name":"hash"}` form; unreadable text reads as no records.
pub(super) fn hash_records(pod: &Pod, key: &'static str) -> BTreeMap<String, HashRecord> {
    let empty = BTreeMap::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    parse_records(annotations, key).unwrap_or_default()
}

/// The hash this pod records for a SidecarSet (`""` when none).
pub(super) fn recorded_hash(pod: &Pod, key: &'static str, sidecar_set: &str) -> String {
    hash_records(pod, key)
        .remove(sidecar_set)
        .map(|r| r.hash)
        .unwrap_or_default()
}

/// `IsPodSidecarUpdated`: the pod's record equals the SidecarSet's hash.
pub(super) fn is_updated(sidecar_set: &SidecarSet, pod: &Pod) -> bool {
    recorded_hash(pod, HASH_ANNOTATION, sidecar_set_name(sidecar_set))
        == sidecar_set_hash(sidecar_set)
}

/// The without-image hash recorded at injection equals the SidecarSet's:
/// only images changed since, so the pod can be upgraded in place.
pub(super) fn without_image_hash_matches(sidecar_set: &SidecarSet, pod: &Pod) -> bool {
    recorded_hash(
        pod,
        HASH_WITHOUT_IMAGE_ANNOTATION,
        sidecar_set_name(sidecar_set),
    ) == own_annotation(sidecar_set, HASH_WITHOUT_IMAGE_ANNOTATION)
}

/// Names in the pod's `kruise.io/sidecarset-injected-list`.
pub(super) fn injected_list(pod: &Pod) -> BTreeSet<String> {
    annotation(pod, INJECTED_LIST_ANNOTATION)
        .into_iter()
        .flat_map(|list| list.split(','))
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The working-twin map (`kruise.io/sidecarset-working-hotupgrade-container`);
/// unreadable text reads as empty, as in OpenKruise.
pub(super) fn working_map(pod: &Pod) -> BTreeMap<String, String> {
    annotation(pod, WORKING_HOT_UPGRADE_ANNOTATION)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// `(name-1, name-2)`.
pub(super) fn twin_names(sidecar: &str) -> (String, String) {
    (format!("{sidecar}-1"), format!("{sidecar}-2"))
}

/// `(working, idle)` twins of a hot-upgraded sidecar: `name-1` works only
/// when the map says so, otherwise `name-2` does.
pub(super) fn working_and_idle(sidecar: &str, pod: &Pod) -> (String, String) {
    let (first, second) = twin_names(sidecar);
    if working_map(pod).get(sidecar) == Some(&first) {
        (first, second)
    } else {
        (second, first)
    }
}

pub(super) fn empty_image(sidecar: &SidecarContainer) -> &str {
    sidecar
        .upgrade_strategy
        .as_ref()
        .and_then(|s| s.hot_upgrade_empty_image.as_deref())
        .unwrap_or_default()
}

pub(super) fn hot_sidecars(sidecar_set: &SidecarSet) -> impl Iterator<Item = &SidecarContainer> {
    sidecar_set
        .spec
        .containers
        .iter()
        .filter(|c| c.is_hot_upgrade())
}

/// `GetSidecarContainersInPod`: the pod container names of the
/// SidecarSet's containers (both twins of a hot-upgraded one).
pub(super) fn sidecar_container_names(sidecar_set: &SidecarSet) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for sidecar in &sidecar_set.spec.containers {
        if sidecar.is_hot_upgrade() {
            let (first, second) = twin_names(sidecar.name());
            names.insert(first);
            names.insert(second);
        } else {
            names.insert(sidecar.name().to_owned());
        }
    }
    names
}

/// The idle twins of the pod's hot-upgraded sidecars.
pub(super) fn idle_twins(sidecar_set: &SidecarSet, pod: &Pod) -> BTreeSet<String> {
    hot_sidecars(sidecar_set)
        .map(|sidecar| working_and_idle(sidecar.name(), pod).1)
        .collect()
}

pub(super) fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map_or(&[], |spec| spec.containers.as_slice())
}

pub(super) fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    containers(pod).iter().find(|c| c.name == name)
}

pub(super) fn image<'a>(pod: &'a Pod, name: &str) -> &'a str {
    container(pod, name)
        .and_then(|c| c.image.as_deref())
        .unwrap_or_default()
}

pub(super) fn statuses(pod: &Pod) -> &[ContainerStatus] {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default()
}

pub(super) fn status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    statuses(pod).iter().find(|s| s.name == name)
}

/// Spec 02 §3 step 1 (c): every sidecar container of the SidecarSet is in
/// the pod (for a hot-upgraded one: a working-map entry and both twins).
pub(super) fn has_all_sidecars(sidecar_set: &SidecarSet, pod: &Pod) -> bool {
    let working = working_map(pod);
    sidecar_set.spec.containers.iter().all(|sidecar| {
        if sidecar.is_hot_upgrade() {
            let (first, second) = twin_names(sidecar.name());
            working.contains_key(sidecar.name())
                && container(pod, &first).is_some()
                && container(pod, &second).is_some()
        } else {
            container(pod, sidecar.name()).is_some()
        }
    })
}

fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default")
}

/// The SidecarSet's scope and selector match the pod (spec 02 §3 step 1,
/// first half). `namespace_labels` maps namespace names to their labels;
/// a namespace missing from it is out of scope for a `namespaceSelector`.
pub(super) fn selects(
    sidecar_set: &SidecarSet,
    pod: &Pod,
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<bool, UpdateError> {
    let namespace = pod_namespace(pod);
    matching::selects(sidecar_set, pod, namespace, namespace_labels.get(namespace)).map_err(
        |source| UpdateError::InvalidSelector {
            sidecar_set: sidecar_set_name(sidecar_set).to_owned(),
            field: "spec.selector",
            source,
        },
    )
}

/// Spec 02 §3 step 1: selected, active, injected by this SidecarSet and
/// carrying all its sidecars. Other pods are invisible to the controller.
pub(super) fn is_matching(
    sidecar_set: &SidecarSet,
    pod: &Pod,
    namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
) -> Result<bool, UpdateError> {
    Ok(selects(sidecar_set, pod, namespace_labels)?
        && is_active(pod)
        && injected_list(pod).contains(sidecar_set_name(sidecar_set))
        && has_all_sidecars(sidecar_set, pod))
}

/// k8s `IsPodReady`: the Ready condition is True.
pub(super) fn has_ready_condition(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Running, Ready and not being deleted.
pub(super) fn is_running_and_ready(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    phase == Some("Running")
        && has_ready_condition(pod)
        && pod.metadata.deletion_timestamp.is_none()
}
