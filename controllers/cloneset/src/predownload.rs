//! Image pre-download for an in-place rollout: makes the ImagePullJobs
//! [`kruise_core::cloneset::predownload::plan`] asks for (owned by the
//! CloneSet, so they go with it) and deletes them once the rollout is
//! over. The ImagePullJob controller and the node agents do the pulls.
//!
//! The update revision carries what was done (OpenKruise's
//! [`CREATED_LABEL`]), so a rollout's rounds make its jobs once and list
//! them for deletion once, not every round.

use k8s_openapi::api::apps::v1::ControllerRevision;
use kruise_api::{CloneSet, ImagePullJob};
use kruise_controller_runtime::api_error::{is_already_exists, is_not_found};
use kruise_controller_runtime::expectations::OwnerWrites;
use kruise_core::cloneset::Revisions;
use kruise_core::cloneset::predownload::{CREATED_LABEL, Predownload, plan};
use kruise_core::owner::is_controlled_by;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::reconcile::ReconcileError;

/// Where the update revision is read and its mark written (noted in the
/// CloneSet's revision expectations).
pub(crate) struct UpdateRevision<'a> {
    pub api: &'a Api<ControllerRevision>,
    pub written: OwnerWrites<'a>,
    /// As stored; None when this round made it.
    pub stored: Option<&'a ControllerRevision>,
}

pub(crate) async fn sync(
    client: &Client,
    cloneset: &CloneSet,
    revisions: &Revisions,
    update: UpdateRevision<'_>,
) -> Result<(), ReconcileError> {
    let updated_ready = cloneset
        .status
        .as_ref()
        .map_or(0, |s| s.updated_ready_replicas);
    let namespace = cloneset.namespace().unwrap_or_default();
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), &namespace);
    let labels = update.stored.and_then(|r| r.metadata.labels.as_ref());
    match plan(cloneset, revisions, labels, updated_ready) {
        Predownload::Off => Ok(()),
        Predownload::Jobs(wanted) => {
            for job in wanted {
                match jobs.create(&PostParams::default(), &job).await {
                    Ok(_) => {
                        tracing::info!(job = %job.name_any(), image = %job.spec.image, "pre-download started");
                    }
                    Err(error) if is_already_exists(&error) => {}
                    Err(error) => {
                        return Err(ReconcileError::api("create a pre-download job")(error));
                    }
                }
            }
            mark(&update, &revisions.update, Some("true")).await
        }
        Predownload::Done => {
            let uid = cloneset.uid().unwrap_or_default();
            let listed = jobs
                .list(&ListParams::default())
                .await
                .map_err(ReconcileError::api("list the pre-download jobs"))?;
            for job in listed
                .items
                .iter()
                .filter(|j| is_controlled_by(&j.metadata, &uid))
            {
                match jobs.delete(&job.name_any(), &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(error) if is_not_found(&error) => {}
                    Err(error) => {
                        return Err(ReconcileError::api("delete a pre-download job")(error));
                    }
                }
            }
            mark(&update, &revisions.update, None).await
        }
    }
}

/// Puts [`CREATED_LABEL`] on revision `name` (`Some`) or takes it off.
async fn mark(
    update: &UpdateRevision<'_>,
    name: &str,
    value: Option<&str>,
) -> Result<(), ReconcileError> {
    let patch = json!({"metadata": {"labels": {CREATED_LABEL: value}}});
    let marked = update
        .api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(ReconcileError::api(format!("mark revision {name}")))?;
    update.written.wrote(&marked);
    Ok(())
}
