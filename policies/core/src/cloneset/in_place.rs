//! Whether a revision change can be applied to a running pod (spec 03 §8.1)
//! and what to patch when it can.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use serde_json::Value;

use super::pod_state::annotation;
use super::{ANNOTATION_IN_PLACE_UPDATE_STATE, CONDITION_IN_PLACE_UPDATE_READY};

/// What an in-place update writes to the pod. Metadata maps hold the new
/// value, or `None` for a key the new template dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InPlaceUpdateSpec {
    pub revision: String,
    /// Container name → new image.
    pub container_images: BTreeMap<String, String>,
    pub labels: BTreeMap<String, Option<String>>,
    pub annotations: BTreeMap<String, Option<String>>,
    /// Containers that read a changed label/annotation through the downward
    /// API and therefore restart in place (`InPlaceUpdateEnvFromMetadata`).
    pub env_from_metadata_containers: Vec<String>,
    /// Seconds between marking the pod not-ready and patching images.
    pub grace_seconds: i32,
}

fn map_diff(
    old: Option<&BTreeMap<String, String>>,
    new: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, Option<String>> {
    let empty = BTreeMap::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let mut diff: BTreeMap<String, Option<String>> = crate::ordered::map(
        new.iter()
            .filter(|(key, value)| old.get(*key) != Some(value))
            .map(|(key, value)| (key.clone(), Some(value.clone()))),
    );
    diff.extend(
        old.keys()
            .filter(|key| !new.contains_key(*key))
            .map(|key| (key.clone(), None)),
    );
    diff
}

/// The pod spec with every container image blanked, for "only images
/// changed" comparisons.
fn spec_without_images(template: &PodTemplateSpec) -> Value {
    let mut spec = template.spec.clone().unwrap_or_default();
    for container in &mut spec.containers {
        container.image = None;
    }
    serde_json::to_value(spec).unwrap_or(Value::Null)
}

/// `metadata.labels['k']` / `metadata.annotations['k']` field paths of a
/// container's env, whose values change with the pod metadata.
fn reads_metadata(container: &k8s_openapi::api::core::v1::Container, changed: &[String]) -> bool {
    container.env.iter().flatten().any(|env| {
        env.value_from
            .as_ref()
            .and_then(|from| from.field_ref.as_ref())
            .is_some_and(|field| changed.contains(&field.field_path))
    })
}

/// Spec §8.1: `Some` when `from` → `to` changes only container images
/// (`replace` of `/spec/containers/<i>/image`) and template metadata.
pub fn calculate_in_place_update(
    from: &PodTemplateSpec,
    to: &PodTemplateSpec,
    to_revision: &str,
    grace_seconds: i32,
) -> Option<InPlaceUpdateSpec> {
    if spec_without_images(from) != spec_without_images(to) {
        return None;
    }
    let (old_spec, new_spec) = (
        from.spec.clone().unwrap_or_default(),
        to.spec.clone().unwrap_or_default(),
    );
    let mut container_images = BTreeMap::new();
    for (old, new) in old_spec.containers.iter().zip(&new_spec.containers) {
        if old.image != new.image {
            // Removing an image is not a `replace` op.
            container_images.insert(new.name.clone(), new.image.clone()?);
        }
    }
    let (old_meta, new_meta) = (
        from.metadata.clone().unwrap_or_default(),
        to.metadata.clone().unwrap_or_default(),
    );
    let labels = map_diff(old_meta.labels.as_ref(), new_meta.labels.as_ref());
    let annotations = map_diff(old_meta.annotations.as_ref(), new_meta.annotations.as_ref());
    let changed_paths: Vec<String> = labels
        .keys()
        .map(|key| format!("metadata.labels['{key}']"))
        .chain(
            annotations
                .keys()
                .map(|key| format!("metadata.annotations['{key}']")),
        )
        .collect();
    let env_from_metadata_containers = new_spec
        .containers
        .iter()
        .filter(|container| reads_metadata(container, &changed_paths))
        .map(|container| container.name.clone())
        .collect();
    Some(InPlaceUpdateSpec {
        revision: to_revision.to_owned(),
        container_images,
        labels,
        annotations,
        env_from_metadata_containers,
        grace_seconds,
    })
}

/// Normalises an image reference the way the completion check compares
/// them: an untagged, undigested image means `:latest`.
fn with_default_tag(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') || last.contains('@') {
        image.to_owned()
    } else {
        format!("{image}:latest")
    }
}

/// Spec §8.3, the part a planner can decide from the pod alone: an in-place
/// update recorded in `apps.kruise.io/inplace-update-state` is complete when
/// no grace is pending and every recorded container reports a new imageID,
/// or runs the spec image.
pub fn is_in_place_update_completed(pod: &Pod) -> bool {
    if annotation(pod, super::ANNOTATION_IN_PLACE_UPDATE_GRACE).is_some() {
        return false;
    }
    let Some(state) = annotation(pod, ANNOTATION_IN_PLACE_UPDATE_STATE)
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
    else {
        return true;
    };
    let pending_next = ["nextContainerImages", "nextContainerRefMetadata"]
        .iter()
        .any(|key| {
            state
                .get(key)
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
        });
    if pending_next {
        return false;
    }
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let spec_images: BTreeMap<&str, &str> = crate::ordered::map(
        pod.spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .filter_map(|c| Some((c.name.as_str(), c.image.as_deref()?))),
    );
    let recorded = state
        .get("lastContainerStatuses")
        .and_then(Value::as_object);
    recorded.into_iter().flatten().all(|(name, last)| {
        let Some(status) = statuses.iter().find(|s| &s.name == name) else {
            return false;
        };
        let old_image_id = last
            .get("imageID")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let image_moved = spec_images
            .get(name.as_str())
            .is_none_or(|spec| with_default_tag(spec) == with_default_tag(&status.image));
        status.image_id != old_image_id || image_moved
    })
}

/// `InPlaceUpdateReady` is not (yet) True: set False by an in-place update
/// in progress, or never written on a freshly created pod.
pub fn awaits_in_place_ready(pod: &Pod) -> bool {
    super::pod_state::condition(pod, CONDITION_IN_PLACE_UPDATE_READY)
        .is_none_or(|c| c.status != "True")
}
