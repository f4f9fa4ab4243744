//! The pod writes of a round (spec 02 §2, §3 step 8, §7, §8): new sidecar
//! images and the annotations that go with them, as one patch per pod.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kruise_api::SidecarSet;
use serde_json::{Map, Value, json};

use super::pods::{
    annotation, empty_image, hash_records, hot_sidecars, image, sidecar_set_hash, status,
    working_and_idle, working_map,
};
use super::status::{seconds, upgradable_condition};
use super::{INPLACE_UPDATE_STATE_ANNOTATION, PodKey, UpdateError, hot};
use crate::sidecarset::annotations::{
    patch_pod_metadata, version_alt_annotation, version_annotation,
};
use crate::sidecarset::{HASH_ANNOTATION, WORKING_HOT_UPGRADE_ANNOTATION, sidecar_set_name};

/// Why a pod is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// New sidecar images (cold containers, or the idle hot-upgrade twin),
    /// the new hash record and `patchPodMetadata`.
    Upgrade,
    /// Hot upgrade step 3: the old working twin goes back to the empty image.
    ResetHotUpgrade,
}

/// One pod write. Annotations hold full new values of the keys that change
/// (none are removed); images are keyed by container name. Nothing else in
/// the pod changes.
#[derive(Clone, Debug, PartialEq)]
pub struct PodChange {
    pub pod: PodKey,
    /// The `resourceVersion` the change was computed from; the patch carries
    /// it, so a concurrent write makes the PATCH fail with a conflict.
    pub resource_version: Option<String>,
    pub kind: ChangeKind,
    pub images: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// After a successful upgrade: the `SidecarSetUpgradable` condition to
    /// patch onto the pod status, if it changes.
    pub upgradable_condition: Option<PodCondition>,
}

impl PodChange {
    /// The change as a strategic merge patch for `PATCH pods/<name>`
    /// (`application/strategic-merge-patch+json`): containers are merged by
    /// name, so only their `image` changes.
    pub fn strategic_merge_patch(&self) -> Value {
        let mut metadata = Map::new();
        if let Some(version) = &self.resource_version {
            metadata.insert("resourceVersion".to_owned(), json!(version));
        }
        if !self.annotations.is_empty() {
            metadata.insert("annotations".to_owned(), json!(self.annotations));
        }
        let mut patch = Map::new();
        patch.insert("metadata".to_owned(), Value::Object(metadata));
        if !self.images.is_empty() {
            let containers: Vec<Value> = self
                .images
                .iter()
                .map(|(name, image)| json!({"name": name, "image": image}))
                .collect();
            patch.insert("spec".to_owned(), json!({ "containers": containers }));
        }
        Value::Object(patch)
    }

    /// The pod as the API server stores it after the patch (tests and
    /// simulations; the controller sends [`Self::strategic_merge_patch`]).
    pub fn apply(&self, pod: &mut Pod) {
        if let Some(spec) = pod.spec.as_mut() {
            for container in &mut spec.containers {
                if let Some(image) = self.images.get(&container.name) {
                    container.image = Some(image.clone());
                }
            }
        }
        pod.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(self.annotations.clone());
    }
}

/// A `SidecarSetUpgradable` condition to patch on a pod's status.
#[derive(Clone, Debug, PartialEq)]
pub struct ConditionChange {
    pub pod: PodKey,
    pub condition: PodCondition,
}

impl ConditionChange {
    /// Strategic merge patch for `PATCH pods/<name>/status` (conditions
    /// merge by `type`).
    pub fn status_patch(&self) -> Value {
        json!({ "status": { "conditions": [self.condition] } })
    }
}

fn pod_annotations(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.annotations.clone().unwrap_or_default()
}

/// Only the keys whose value changes.
fn changed(
    before: &BTreeMap<String, String>,
    after: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    after
        .into_iter()
        .filter(|(key, value)| before.get(key) != Some(value))
        .collect()
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Spec 02 §3 step 8 for one pod: upgrade images, re-apply
/// `patchPodMetadata`, rewrite the hash record and the in-place state.
pub(super) fn upgrade(
    sidecar_set: &SidecarSet,
    pod: &Pod,
    latest_revision: &str,
    now: Timestamp,
) -> Result<PodChange, UpdateError> {
    let before = pod_annotations(pod);
    let mut after = before.clone();
    let mut images = BTreeMap::new();
    let resource_version = sidecar_set
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let mut working = working_map(pod);
    let mut hot_changed = false;
    for sidecar in &sidecar_set.spec.containers {
        let desired = sidecar.container.image.clone().unwrap_or_default();
        if !sidecar.is_hot_upgrade() {
            if image(pod, sidecar.name()) != desired {
                images.insert(sidecar.name().to_owned(), desired);
            }
            continue;
        }
        let (mut target, mut other) = hot::twin_to_upgrade(sidecar_set, sidecar, pod);
        if image(pod, &other) == desired {
            // The desired image already runs on `other`: nothing to do if it
            // is the working twin; otherwise (the SidecarSet went back to the
            // old image mid-upgrade) hand the work back to it, so step 3
            // resets the newer twin. OpenKruise skips this case and records
            // the pod as updated while the other image keeps working.
            if working_and_idle(sidecar.name(), pod).0 == other {
                continue;
            }
            std::mem::swap(&mut target, &mut other);
        } else {
            images.insert(target.clone(), desired);
        }
        working.insert(sidecar.name().to_owned(), target.clone());
        hot_changed = true;
        let other_version = before
            .get(&version_annotation(&other))
            .cloned()
            .unwrap_or_default();
        after.insert(version_annotation(&target), resource_version.clone());
        after.insert(version_alt_annotation(&target), other_version);
        after.insert(version_alt_annotation(&other), resource_version.clone());
    }
    if hot_changed {
        after.insert(WORKING_HOT_UPGRADE_ANNOTATION.to_owned(), to_json(&working));
    }
    patch_pod_metadata(&mut after, sidecar_set).map_err(|e| UpdateError::PatchPodMetadata {
        sidecar_set: sidecar_set_name(sidecar_set).to_owned(),
        pod: PodKey::of(pod).name,
        message: e.to_string(),
    })?;
    after.insert(
        HASH_ANNOTATION.to_owned(),
        hash_annotation(sidecar_set, pod, latest_revision, now),
    );
    let changed_containers: Vec<&String> = images.keys().collect();
    after.insert(
        INPLACE_UPDATE_STATE_ANNOTATION.to_owned(),
        in_place_state(sidecar_set, pod, &changed_containers, now),
    );
    Ok(PodChange {
        pod: PodKey::of(pod),
        resource_version: pod.metadata.resource_version.clone(),
        kind: ChangeKind::Upgrade,
        images,
        annotations: changed(&before, after),
        upgradable_condition: upgradable_condition(pod, sidecar_set, true, now),
    })
}

/// Hot upgrade step 3 for one pod: every idle twin not on the empty image
/// gets it, with its version annotations zeroed.
pub(super) fn reset(sidecar_set: &SidecarSet, pod: &Pod, now: Timestamp) -> PodChange {
    let before = pod_annotations(pod);
    let mut after = before.clone();
    let mut images = BTreeMap::new();
    for sidecar in hot_sidecars(sidecar_set) {
        let (working, idle) = working_and_idle(sidecar.name(), pod);
        let empty = empty_image(sidecar);
        if image(pod, &idle) == empty {
            continue;
        }
        images.insert(idle.clone(), empty.to_owned());
        after.insert(version_annotation(&idle), "0".to_owned());
        after.insert(version_alt_annotation(&working), "0".to_owned());
    }
    let changed_containers: Vec<&String> = images.keys().collect();
    after.insert(
        INPLACE_UPDATE_STATE_ANNOTATION.to_owned(),
        in_place_state(sidecar_set, pod, &changed_containers, now),
    );
    PodChange {
        pod: PodKey::of(pod),
        resource_version: pod.metadata.resource_version.clone(),
        kind: ChangeKind::ResetHotUpgrade,
        images,
        annotations: changed(&before, after),
        upgradable_condition: None,
    }
}

/// `UpdatePodSidecarSetHash`: this SidecarSet's record now names its
/// current hash and latest revision; other SidecarSets' records stay.
fn hash_annotation(
    sidecar_set: &SidecarSet,
    pod: &Pod,
    latest_revision: &str,
    now: Timestamp,
) -> String {
    let mut records = hash_records(pod, HASH_ANNOTATION);
    let name = sidecar_set_name(sidecar_set);
    let sidecar_list: BTreeSet<String> = sidecar_set
        .spec
        .init_containers
        .iter()
        .filter(|c| c.is_native_sidecar())
        .chain(&sidecar_set.spec.containers)
        .map(|c| c.name().to_owned())
        .collect();
    records.insert(
        name.to_owned(),
        super::pods::HashRecord {
            update_timestamp: Some(seconds(now).to_string()),
            hash: sidecar_set_hash(sidecar_set).to_owned(),
            sidecar_set_name: name.to_owned(),
            sidecar_list: Some(sidecar_list.into_iter().collect()),
            controller_revision: latest_revision.to_owned(),
        },
    );
    to_json(&records)
}

/// Spec 02 §8: the pre-change `imageID` of each changed container under this
/// SidecarSet's entry; `revision` and `updateTimestamp` only when the entry
/// is new. An unreadable annotation starts over.
fn in_place_state(
    sidecar_set: &SidecarSet,
    pod: &Pod,
    changed_containers: &[&String],
    now: Timestamp,
) -> String {
    let mut states: Map<String, Value> = annotation(pod, INPLACE_UPDATE_STATE_ANNOTATION)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    let entry = states
        .entry(sidecar_set_name(sidecar_set).to_owned())
        .or_insert_with(|| {
            json!({
                "revision": sidecar_set_hash(sidecar_set),
                "updateTimestamp": seconds(now).to_string(),
            })
        });
    if !entry.is_object() {
        *entry = json!({
            "revision": sidecar_set_hash(sidecar_set),
            "updateTimestamp": seconds(now).to_string(),
        });
    }
    if let Value::Object(fields) = entry {
        let last = fields
            .entry("lastContainerStatuses".to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if !last.is_object() {
            *last = Value::Object(Map::new());
        }
        if let Value::Object(last) = last {
            for name in changed_containers {
                let image_id = status(pod, name)
                    .map(|s| s.image_id.as_str())
                    .unwrap_or_default();
                let recorded = if image_id.is_empty() {
                    json!({})
                } else {
                    json!({ "imageID": image_id })
                };
                last.insert((*name).clone(), recorded);
            }
        }
    }
    Value::Object(states).to_string()
}
