//! The writes of a round, exactly as the planner returned them.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kruise_api::SidecarSet;
use kruise_api::sidecarset::SidecarSetStatus;
use kruise_core::sidecarset::update::{
    CUSTOM_VERSION_LABEL, ChangeKind, ConditionChange, EVENT_RESET_CONTAINER_FAILED,
    EVENT_RESET_CONTAINER_SUCCEED, PodChange, PodKey, REVISION_OWNER_LABEL, RevisionWrite,
    UpdatePlan, plan_revisions,
};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};

use kruise_controller_runtime::api_error::{is_conflict, is_not_found};
use kruise_controller_runtime::expectations::OwnerWrites;
use kruise_controller_runtime::status::replace_status;

use crate::{CONTROLLER_NAME, Context, Error, REVISION_NAMESPACE, ensure_revision_namespace};

/// The action of every event this controller publishes.
pub(crate) const UPDATE: &str = "Update";
/// How many times a revision create may collide before the round fails.
const REVISION_ATTEMPTS: usize = 5;

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(CONTROLLER_NAME.to_owned()),
        ..PatchParams::default()
    }
}

/// Spec 02 §6: make the latest revision exist (create, or bump an older
/// equal one), label it with the custom version, delete what the history
/// limit drops. Returns its name and the collision count, or None while
/// the revision watch lacks this SidecarSet's last revision writes (their
/// events start the next round).
pub(crate) async fn sync_revisions(
    context: &Context,
    sidecar_set: &SidecarSet,
    matched: &[&Pod],
) -> Result<Option<(String, i32)>, Error> {
    let name = sidecar_set_name(sidecar_set);
    let api: Api<ControllerRevision> = Api::namespaced(context.client.clone(), REVISION_NAMESPACE);
    let Some(mut existing) = read_revisions(context, &api, name).await? else {
        return Ok(None);
    };
    let written = context.revisions.writes_of(name);
    for _ in 0..REVISION_ATTEMPTS {
        let plan = plan_revisions(sidecar_set, &existing, matched, REVISION_NAMESPACE);
        let latest = plan.latest.metadata.name.clone().unwrap_or_default();
        match &plan.write {
            RevisionWrite::None => {}
            RevisionWrite::Bump { name, revision } => {
                let bumped = api
                    .patch(
                        name,
                        &params(),
                        &Patch::Merge(json!({ "revision": revision })),
                    )
                    .await?;
                written.wrote(&bumped);
                tracing::info!(sidecar_set = %sidecar_set_name(sidecar_set), revision = %name, "rolled back to an earlier revision");
            }
            RevisionWrite::Create(revision) => {
                match api.create(&PostParams::default(), revision).await {
                    Ok(created) => {
                        written.wrote(&created);
                        tracing::info!(sidecar_set = %sidecar_set_name(sidecar_set), revision = %latest, "created revision");
                    }
                    Err(error) if is_conflict(&error) => {
                        // Someone holds the name: plan again knowing it.
                        let found = api.get(&latest).await?;
                        existing.retain(|r| r.metadata.name != found.metadata.name);
                        existing.push(found);
                        continue;
                    }
                    Err(error) if is_not_found(&error) => {
                        ensure_revision_namespace(&context.client).await?;
                        continue;
                    }
                    Err(error) => return Err(error.into()),
                }
            }
        }
        if let Some(version) = &plan.custom_version_label {
            let labels = json!({ "metadata": { "labels": { CUSTOM_VERSION_LABEL: version } } });
            let labelled = api.patch(&latest, &params(), &Patch::Merge(labels)).await?;
            written.wrote(&labelled);
        }
        for old in &plan.delete {
            let uid = existing
                .iter()
                .find(|r| r.metadata.name.as_ref() == Some(old))
                .and_then(|r| r.metadata.uid.as_deref());
            match api.delete(old, &DeleteParams::default()).await {
                Ok(answer) => written.deleted(uid, answer.as_ref().left()),
                Err(error) if is_not_found(&error) => {}
                Err(error) => return Err(error.into()),
            }
        }
        if let Some(message) = &plan.truncate_error {
            tracing::error!(sidecar_set = %sidecar_set_name(sidecar_set), "{message}");
        }
        return Ok(Some((latest, plan.collision_count)));
    }
    Err(Error::RevisionCollision(name.to_owned()))
}

/// The SidecarSet's revisions: from the shared revision watch once it
/// holds this controller's last revision writes (a round runs for nearly
/// every pod event, and a LIST each time was most of the rollout's reads),
/// else listed; None while the watch is behind.
async fn read_revisions(
    context: &Context,
    api: &Api<ControllerRevision>,
    name: &str,
) -> Result<Option<Vec<ControllerRevision>>, kube::Error> {
    let owned = |revision: &ControllerRevision| {
        revision.metadata.namespace.as_deref() == Some(REVISION_NAMESPACE)
            && revision
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(REVISION_OWNER_LABEL))
                .is_some_and(|owner| owner == name)
    };
    let params = ListParams::default().labels(&format!("{REVISION_OWNER_LABEL}={name}"));
    let read = context
        .revisions
        .read_or_list(name, api, &params, owned)
        .await?;
    Ok(read.map(|revisions| {
        revisions
            .iter()
            .map(|r| ControllerRevision::clone(r))
            .collect()
    }))
}

fn sidecar_set_name(sidecar_set: &SidecarSet) -> &str {
    sidecar_set.metadata.name.as_deref().unwrap_or_default()
}

/// The whole status, on the version the round read (a stale one is
/// dropped: the SidecarSet's watch event brings the next round).
pub(crate) async fn write_status(
    client: &Client,
    sidecar_set: &SidecarSet,
    status: &SidecarSetStatus,
) -> Result<(), kube::Error> {
    let api: Api<SidecarSet> = Api::all(client.clone());
    let mut updated = sidecar_set.clone();
    updated.status = Some(status.clone());
    replace_status(&api, &updated, CONTROLLER_NAME).await?;
    Ok(())
}

/// What the pod writes of a round came to.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Pods whose change was written.
    pub written: Vec<PodKey>,
    /// Changes refused because the pod moved since it was read.
    pub conflicts: usize,
    /// Changes that failed otherwise (`failures` keeps the first few).
    pub failed: usize,
    pub failures: Vec<kube::Error>,
}

/// Status, events, `SidecarSetUpgradable` conditions, then the pod changes
/// in order. Only the status write failing stops the round early; a pod
/// write failing does not stop the others (each was allowed on its own).
pub(crate) async fn execute(
    context: &Context,
    sidecar_set: &SidecarSet,
    pods: &[&Pod],
    plan: &UpdatePlan,
) -> Result<Outcome, Error> {
    let client = &context.client;
    let name = sidecar_set_name(sidecar_set);
    let written = context.pods.writes_of(name);
    if plan.status_changed {
        write_status(client, sidecar_set, &plan.status).await?;
    }
    let reference = sidecar_set.object_ref(&());
    for event in &plan.events {
        let events = &context.events;
        if event.type_ == "Warning" {
            events
                .warning(&reference, event.reason, UPDATE, &event.message)
                .await;
        } else {
            events
                .normal(&reference, event.reason, UPDATE, &event.message)
                .await;
        }
    }
    for change in &plan.condition_changes {
        if let Err(error) =
            patch_condition(client, written, &change.pod, change.status_patch()).await
        {
            tracing::warn!(sidecar_set = %name, pod = ?change.pod, %error, "cannot set the SidecarSetUpgradable condition");
        }
    }

    let mut outcome = Outcome::default();
    for change in &plan.pod_changes {
        let result = patch_pod(client, written, change).await;
        let pod_reference = pod_reference(pods, &change.pod);
        match result {
            Ok(()) => {
                tracing::info!(sidecar_set = %name, pod = ?change.pod, kind = ?change.kind, images = ?change.images, "pod updated");
                outcome.written.push(change.pod.clone());
                if let Some(condition) = &change.upgradable_condition {
                    let patch = ConditionChange {
                        pod: change.pod.clone(),
                        condition: condition.clone(),
                    }
                    .status_patch();
                    if let Err(error) = patch_condition(client, written, &change.pod, patch).await {
                        tracing::warn!(sidecar_set = %name, pod = ?change.pod, %error, "cannot set the SidecarSetUpgradable condition");
                    }
                }
                if change.kind == ChangeKind::ResetHotUpgrade {
                    let note = format!(
                        "reset sidecar container image {} to the empty image",
                        change.images.keys().cloned().collect::<Vec<_>>().join(",")
                    );
                    context
                        .events
                        .normal(&pod_reference, EVENT_RESET_CONTAINER_SUCCEED, UPDATE, &note)
                        .await;
                }
            }
            Err(error) if is_conflict(&error) => {
                tracing::info!(sidecar_set = %name, pod = ?change.pod, "pod changed since it was read; planning again");
                outcome.conflicts += 1;
            }
            Err(error) if is_not_found(&error) => {
                tracing::debug!(sidecar_set = %name, pod = ?change.pod, "pod is gone");
            }
            Err(error) => {
                tracing::warn!(sidecar_set = %name, pod = ?change.pod, %error, "cannot update pod");
                if change.kind == ChangeKind::ResetHotUpgrade {
                    let note = format!("failed to reset the old sidecar container: {error}");
                    context
                        .events
                        .warning(&pod_reference, EVENT_RESET_CONTAINER_FAILED, UPDATE, &note)
                        .await;
                }
                outcome.failed += 1;
                if outcome.failures.is_empty() {
                    outcome.failures.push(error);
                }
            }
        }
    }
    Ok(outcome)
}

async fn patch_pod(
    client: &Client,
    written: OwnerWrites<'_>,
    change: &PodChange,
) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &change.pod.namespace);
    let patched = api
        .patch(
            &change.pod.name,
            &params(),
            &Patch::Strategic(change.strategic_merge_patch()),
        )
        .await?;
    written.wrote(&patched);
    Ok(())
}

async fn patch_condition(
    client: &Client,
    written: OwnerWrites<'_>,
    pod: &PodKey,
    patch: Value,
) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace);
    let patched = api
        .patch_status(&pod.name, &params(), &Patch::Strategic(patch))
        .await?;
    written.wrote(&patched);
    Ok(())
}

fn pod_reference(pods: &[&Pod], key: &PodKey) -> ObjectReference {
    let uid = pods
        .iter()
        .find(|p| key.names(p))
        .and_then(|p| p.metadata.uid.clone());
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        name: Some(key.name.clone()),
        namespace: Some(key.namespace.clone()),
        uid,
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn pod_references_carry_the_uid_when_known() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        }))
        .unwrap();
        let key = PodKey {
            namespace: "ns".to_owned(),
            name: "p".to_owned(),
        };
        let reference = pod_reference(&[&pod], &key);
        assert_eq!(reference.uid.as_deref(), Some("u-1"));
        assert_eq!(reference.kind.as_deref(), Some("Pod"));
        let unknown = PodKey {
            namespace: "ns".to_owned(),
            name: "q".to_owned(),
        };
        assert_eq!(pod_reference(&[&pod], &unknown).uid, None);
    }
}
