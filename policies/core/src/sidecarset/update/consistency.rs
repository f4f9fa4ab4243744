//! Readiness and state consistency of a pod's sidecars (spec 02 §4 step 3,
//! §5, §8): is kubelet running the images the spec asks for?

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};
use kruise_api::SidecarSet;
use serde_json::Value;

use super::INPLACE_UPDATE_STATE_ANNOTATION;
use super::pods::{
    annotation, container, containers, empty_image, hot_sidecars, image, is_running_and_ready,
    sidecar_container_names, status, statuses, working_and_idle,
};
use crate::sidecarset::sidecar_set_name;

/// The SidecarSet's notion of a ready pod (spec 02 §4 step 3): running and
/// ready, and every idle hot-upgrade twin runs exactly the empty image.
pub(super) fn is_ready(sidecar_set: &SidecarSet, pod: &Pod) -> bool {
    let idle_is_empty = hot_sidecars(sidecar_set).all(|sidecar| {
        let empty = empty_image(sidecar);
        let (_, idle) = working_and_idle(sidecar.name(), pod);
        empty.is_empty() || container(pod, &idle).is_none_or(|c| c.image.as_deref() == Some(empty))
    });
    idle_is_empty && is_running_and_ready(pod)
}

/// The `imageID`s recorded in `kruise.io/sidecarset-inplace-update-state`
/// under the named SidecarSets: `None` when the annotation is unreadable.
fn recorded_image_ids(pod: &Pod, sidecar_sets: &[&str]) -> Option<BTreeMap<String, String>> {
    let Some(text) = annotation(pod, INPLACE_UPDATE_STATE_ANNOTATION) else {
        return Some(BTreeMap::new());
    };
    let states: BTreeMap<String, Value> = serde_json::from_str(text).ok()?;
    let mut ids = BTreeMap::new();
    for name in sidecar_sets {
        let recorded = states
            .get(*name)
            .and_then(|state| state.get("lastContainerStatuses"))
            .and_then(Value::as_object);
        for (container, status) in recorded.into_iter().flatten() {
            let id = status.get("imageID").and_then(Value::as_str);
            ids.insert(container.clone(), id.unwrap_or_default().to_owned());
        }
    }
    Some(ids)
}

/// `IsSidecarContainerUpdateCompleted` (spec 02 §8): no named container
/// still reports the `imageID` recorded before its last in-place change
/// while its status image differs from the spec image. A pod without the
/// in-place state annotation is complete; an unreadable one is not.
pub fn is_sidecar_container_update_completed(
    pod: &Pod,
    sidecar_sets: &[&str],
    containers: &BTreeSet<String>,
) -> bool {
    let Some(recorded) = recorded_image_ids(pod, sidecar_sets) else {
        return false;
    };
    statuses(pod)
        .iter()
        .filter(|s| containers.contains(&s.name))
        .all(|current| {
            let Some(last) = recorded.get(&current.name) else {
                return true;
            };
            let spec_image = image(pod, &current.name);
            !(*last == current.image_id
                && normalize_image(spec_image) != normalize_image(&current.image))
        })
}

/// An image reference pinned by digest (`repo@sha256:…`).
pub(super) fn is_digest(image: &str) -> bool {
    image.contains('@')
}

/// `scheme://` stripped from a status `imageID`.
fn strip_scheme(image_id: &str) -> &str {
    image_id
        .split_once("://")
        .map_or(image_id, |(_, rest)| rest)
}

/// `docker.io/library/busybox:latest`-style normalisation, so that the
/// reference kubelet reports and the one in the spec compare equal.
pub(super) fn normalize_image(image: &str) -> String {
    let mut name = image;
    for prefix in ["docker.io/", "index.docker.io/"] {
        name = name.strip_prefix(prefix).unwrap_or(name);
    }
    name = name.strip_prefix("library/").unwrap_or(name);
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') || last.contains('@') {
        name.to_owned()
    } else {
        format!("{name}:latest")
    }
}

fn digest_matches(spec_image: &str, image_id: &str) -> bool {
    normalize_image(spec_image) == normalize_image(strip_scheme(image_id))
}

/// Spec 02 §8 state-consistent check for the named sidecar containers: the
/// images in the spec are what kubelet runs. Same container count in spec
/// and status; digest references compared with the `imageID`; otherwise a
/// container whose recorded pre-upgrade `imageID` is still reported while
/// the status image differs from the spec image is not restarted yet.
pub(super) fn is_consistent(sidecar_set: &str, pod: &Pod, names: &BTreeSet<String>) -> bool {
    if containers(pod).len() != statuses(pod).len() {
        return false;
    }
    let checked: Vec<&Container> = containers(pod)
        .iter()
        .filter(|c| names.contains(&c.name))
        .collect();
    let digest_images: Vec<(&Container, &str)> = checked
        .iter()
        .filter_map(|c| Some((*c, c.image.as_deref().filter(|i| is_digest(i))?)))
        .collect();
    let digest_ok = digest_images
        .iter()
        .all(|(c, image)| status(pod, &c.name).is_some_and(|s| digest_matches(image, &s.image_id)));
    if !digest_ok {
        return false;
    }
    if digest_images.len() == checked.len() {
        return true;
    }
    is_sidecar_container_update_completed(pod, &[sidecar_set], names)
}

/// Consistent for all the SidecarSet's sidecar containers.
pub(super) fn is_consistent_all(sidecar_set: &SidecarSet, pod: &Pod) -> bool {
    is_consistent(
        sidecar_set_name(sidecar_set),
        pod,
        &sidecar_container_names(sidecar_set),
    )
}

/// `readyPods` membership (spec 02 §5): consistent and ready.
pub(super) fn is_consistent_and_ready(sidecar_set: &SidecarSet, pod: &Pod) -> bool {
    is_consistent_all(sidecar_set, pod) && is_ready(sidecar_set, pod)
}
