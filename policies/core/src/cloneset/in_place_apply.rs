//! The writes of an in-place update (spec 03 §8.2) as patches: what the
//! controller sends for [`super::InPlaceUpdate`], a graced update whose
//! time has come, and [`super::InPlaceCompletion`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::LifecycleHook;
use serde_json::{Map, Value, json};

use super::in_place::InPlaceUpdateSpec;
use super::plan::InPlaceCompletion;
use super::pod_state::{LifecycleState, annotation, revision_label, short_hash};
use super::{
    ANNOTATION_IN_PLACE_UPDATE_GRACE, ANNOTATION_IN_PLACE_UPDATE_STATE,
    CONDITION_IN_PLACE_UPDATE_READY, LABEL_LIFECYCLE_STATE, LABEL_POD_TEMPLATE_HASH,
    LABEL_REVISION,
};
use crate::pod_readiness;

/// Step 1: the `pods/status` patch that turns `InPlaceUpdateReady` False
/// before anything changes, and `Ready` with it, as OpenKruise does and
/// as the kubelet would on its next status sync: the pod leaves Service
/// endpoints before its containers restart, not after.
pub fn start_status_patch(now: Timestamp) -> Value {
    let mut patch = condition_patch("False", Some("StartInPlaceUpdate"), now);
    let message = format!(
        "the status of pod readiness gate \"{CONDITION_IN_PLACE_UPDATE_READY}\" is not \"True\", but False"
    );
    let ready = json!({
        "type": "Ready",
        "status": "False",
        "reason": "ReadinessGatesNotReady",
        "message": message,
        "lastTransitionTime": now.to_string(),
    });
    if let Some(conditions) = patch["status"]["conditions"].as_array_mut() {
        conditions.push(ready);
    }
    patch
}

/// The `pods/status` patch of a finished update (or a new pod's first one),
/// with the lifecycle label it moves the pod to. The API server takes label
/// changes through `pods/status` too, so the two are one write. A new pod
/// with OpenKruise's `KruisePodReady` gate gets that condition True in the
/// same write (`pod_readiness::left_to_workload`: the readiness controller
/// leaves such a pod to us), a write per pod less.
pub fn ready_status_patch(pod: &Pod, completion: &InPlaceCompletion, now: Timestamp) -> Value {
    let mut patch = condition_patch("True", None, now);
    if let Some(to) = completion.to {
        patch["metadata"] = lifecycle_patch(to)["metadata"].take();
    }
    let first = pod_readiness::first_condition(pod, now)
        .and_then(|condition| serde_json::to_value(condition).ok());
    if let (Some(first), Some(conditions)) = (first, patch["status"]["conditions"].as_array_mut()) {
        conditions.push(first);
    }
    patch
}

fn condition_patch(status: &str, reason: Option<&str>, now: Timestamp) -> Value {
    let mut condition = json!({
        "type": CONDITION_IN_PLACE_UPDATE_READY,
        "status": status,
        "lastTransitionTime": now.to_string(),
    });
    if let Some(reason) = reason {
        condition["reason"] = json!(reason);
    }
    json!({"status": {"conditions": [condition]}})
}

/// Whether a pod read again after step 2's patch met a conflict is still
/// the pod the update was planned for: not terminating, at the same
/// revision, with the same container images. Then the patch is built again
/// from it. The usual cause is harmless: the kubelet answers step 1 with a
/// status write of its own (the pod turns unready), which moves the
/// resourceVersion the patch carries.
pub fn still_as_planned(planned: &Pod, fresh: &Pod) -> bool {
    let images = |pod: &Pod| -> Vec<(String, Option<String>)> {
        pod.spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .map(|c| (c.name.clone(), c.image.clone()))
            .collect()
    };
    fresh.metadata.deletion_timestamp.is_none()
        && revision_label(fresh) == revision_label(planned)
        && images(fresh) == images(planned)
}

/// Step 2: one strategic merge patch that moves the pod to the new
/// revision, records the in-place state and, without a grace period,
/// changes the images. It carries the pod's resourceVersion, so a write
/// racing with ours fails with a conflict instead of being overwritten.
pub fn update_patch(pod: &Pod, update: &InPlaceUpdateSpec, now: Timestamp) -> Value {
    let mut labels: Map<String, Value> = to_patch_map(&update.labels);
    labels.insert(LABEL_REVISION.to_owned(), json!(update.revision));
    labels.insert(
        LABEL_POD_TEMPLATE_HASH.to_owned(),
        json!(short_hash(&update.revision)),
    );
    if annotation_or_label(pod, LABEL_LIFECYCLE_STATE).is_some() {
        labels.insert(
            LABEL_LIFECYCLE_STATE.to_owned(),
            json!(LifecycleState::Updating.as_str()),
        );
    }
    let mut annotations = to_patch_map(&update.annotations);
    annotations.insert(
        ANNOTATION_IN_PLACE_UPDATE_STATE.to_owned(),
        json!(state_annotation(pod, update, now)),
    );
    let mut patch = json!({
        "metadata": {
            "resourceVersion": pod.metadata.resource_version,
            "labels": labels,
            "annotations": annotations,
        },
    });
    if update.grace_seconds > 0 {
        patch["metadata"]["annotations"][ANNOTATION_IN_PLACE_UPDATE_GRACE] =
            json!(grace_annotation(update).to_string());
    } else {
        patch["spec"] = images_patch(&update.container_images);
    }
    patch
}

/// A graced update whose period has passed: apply the images stored in
/// the grace annotation and drop it. `None` if the annotation is missing
/// or unreadable (the next round recomputes the update).
pub fn apply_graced_patch(pod: &Pod) -> Option<Value> {
    let stored: Value =
        serde_json::from_str(annotation(pod, ANNOTATION_IN_PLACE_UPDATE_GRACE)?).ok()?;
    let images: BTreeMap<String, String> =
        serde_json::from_value(stored.get("containerImages")?.clone()).ok()?;
    Some(json!({
        "metadata": {
            "resourceVersion": pod.metadata.resource_version,
            "annotations": {ANNOTATION_IN_PLACE_UPDATE_GRACE: null},
        },
        "spec": images_patch(&images),
    }))
}

/// The label patch of a completion that moves the lifecycle state on.
pub fn lifecycle_patch(to: LifecycleState) -> Value {
    json!({"metadata": {"labels": {LABEL_LIFECYCLE_STATE: to.as_str()}}})
}

/// The strategic merge patch of a move that also puts `hook`'s labels and
/// finalizers back on the pod (`LifecycleChange::restore_hook`). The API
/// server merges a finalizers list into the pod's, so only the hook's are
/// sent: one another controller removed meanwhile is not put back.
pub fn lifecycle_patch_restoring(to: LifecycleState, hook: &LifecycleHook) -> Value {
    let mut patch = lifecycle_patch(to);
    for (key, value) in &hook.labels_handler {
        patch["metadata"]["labels"][key] = json!(value);
    }
    if !hook.finalizers_handler.is_empty() {
        patch["metadata"]["finalizers"] = json!(hook.finalizers_handler);
    }
    patch
}

fn images_patch(images: &BTreeMap<String, String>) -> Value {
    let containers: Vec<Value> = images
        .iter()
        .map(|(name, image)| json!({"name": name, "image": image}))
        .collect();
    json!({ "containers": containers })
}

fn to_patch_map(changes: &BTreeMap<String, Option<String>>) -> Map<String, Value> {
    changes
        .iter()
        .map(|(key, value)| {
            (
                key.clone(),
                value.as_ref().map_or(Value::Null, |v| json!(v)),
            )
        })
        .collect()
}

fn annotation_or_label<'a>(pod: &'a Pod, key: &str) -> Option<&'a String> {
    pod.metadata.labels.as_ref().and_then(|l| l.get(key))
}

/// `apps.kruise.io/inplace-update-state`: the revision, when, and each
/// updated container's imageID before the update (completion is a new one).
fn state_annotation(pod: &Pod, update: &InPlaceUpdateSpec, now: Timestamp) -> String {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let last: Map<String, Value> = update
        .container_images
        .keys()
        .map(|name| {
            let image_id = statuses
                .iter()
                .find(|s| &s.name == name)
                .map(|s| s.image_id.clone())
                .unwrap_or_default();
            (name.clone(), json!({"imageID": image_id}))
        })
        .collect();
    let containers: Vec<&String> = update.container_images.keys().collect();
    json!({
        "revision": update.revision,
        "updateTimestamp": now.to_string(),
        "lastContainerStatuses": last,
        "updateImages": !update.container_images.is_empty(),
        "updateEnvFromMetadata": !update.env_from_metadata_containers.is_empty(),
        "containerBatchesRecord": [{"timestamp": now.to_string(), "containers": containers}],
    })
    .to_string()
}

fn grace_annotation(update: &InPlaceUpdateSpec) -> Value {
    json!({
        "revision": update.revision,
        "containerImages": update.container_images,
        "graceSeconds": update.grace_seconds,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn pod(revision: &str, image: &str, resource_version: &str, ready: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web-1", "resourceVersion": resource_version,
                "labels": {LABEL_REVISION: revision},
            },
            "spec": {"containers": [
                {"name": "app", "image": image}, {"name": "log", "image": "busybox"},
            ]},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }))
        .unwrap()
    }

    #[test]
    fn the_ready_status_patch_carries_the_lifecycle_label_it_moves_to() {
        let now: Timestamp = "2026-12-06T05:00:00Z".parse().unwrap();
        let condition = json!({"conditions": [{
            "type": CONDITION_IN_PLACE_UPDATE_READY, "status": "True",
            "lastTransitionTime": "2026-12-06T05:00:00Z",
        }]});
        let to_normal = InPlaceCompletion {
            pod: "web-1".into(),
            to: Some(LifecycleState::Normal),
        };
        let plain = pod("web-1", "nginx:1", "10", "True");
        assert_eq!(
            ready_status_patch(&plain, &to_normal, now),
            json!({
                "metadata": {"labels": {LABEL_LIFECYCLE_STATE: "Normal"}},
                "status": condition,
            })
        );
        let gate_only = InPlaceCompletion {
            pod: "web-1".into(),
            to: None,
        };
        assert_eq!(
            ready_status_patch(&plain, &gate_only, now),
            json!({"status": condition})
        );

        // With OpenKruise's gate and no condition yet: opened in the same
        // write; once it has one (True, or held), left as it is.
        let mut gated = plain.clone();
        gated.spec.as_mut().unwrap().readiness_gates = Some(vec![
            serde_json::from_value(json!({"conditionType": "KruisePodReady"})).unwrap(),
        ]);
        let patch = ready_status_patch(&gated, &gate_only, now);
        assert_eq!(
            patch["status"]["conditions"][1],
            json!({"type": "KruisePodReady", "status": "True",
                   "lastTransitionTime": "2026-12-06T05:00:00Z"})
        );
        let mut opened = gated;
        opened
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(
                serde_json::from_value(json!({"type": "KruisePodReady", "status": "False"}))
                    .unwrap(),
            );
        assert_eq!(
            ready_status_patch(&opened, &gate_only, now),
            json!({"status": condition})
        );
    }

    #[test]
    fn a_restoring_move_puts_the_hooks_labels_and_finalizers_back() {
        let hook = LifecycleHook {
            labels_handler: [("hook".to_owned(), "on".to_owned())].into(),
            finalizers_handler: vec!["example.com/hold".to_owned()],
            mark_pod_not_ready: false,
        };
        assert_eq!(
            lifecycle_patch_restoring(LifecycleState::PreparingUpdate, &hook),
            json!({"metadata": {
                "labels": {LABEL_LIFECYCLE_STATE: "PreparingUpdate", "hook": "on"},
                "finalizers": ["example.com/hold"],
            }})
        );
        let labels_only = LifecycleHook {
            finalizers_handler: vec![],
            ..hook
        };
        assert_eq!(
            lifecycle_patch_restoring(LifecycleState::PreparingUpdate, &labels_only),
            json!({"metadata": {"labels": {LABEL_LIFECYCLE_STATE: "PreparingUpdate", "hook": "on"}}})
        );
    }

    #[test]
    fn a_pod_changed_only_by_the_kubelets_status_write_is_still_as_planned() {
        let planned = pod("web-old", "nginx:1", "10", "True");
        assert!(still_as_planned(
            &planned,
            &pod("web-old", "nginx:1", "11", "False")
        ));
    }

    #[test]
    fn another_revision_or_image_or_a_deletion_is_not() {
        let planned = pod("web-old", "nginx:1", "10", "True");
        assert!(!still_as_planned(
            &planned,
            &pod("web-new", "nginx:1", "11", "True")
        ));
        assert!(!still_as_planned(
            &planned,
            &pod("web-old", "nginx:2", "11", "True")
        ));
        let mut deleting = pod("web-old", "nginx:1", "11", "True");
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert!(!still_as_planned(&planned, &deleting));
    }
}
