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
use kruise_core::cloneset::predownload::{CREATED_LABEL, Predownload, has_label, plan};
use kruise_core::owner::is_controlled_by;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::reconcile::ReconcileError;

/// Where the CloneSet's revisions were read and their marks are written
/// (noted in the CloneSet's revision expectations).
pub(crate) struct RevisionMarks<'a> {
    pub api: &'a Api<ControllerRevision>,
    pub written: OwnerWrites<'a>,
    /// The CloneSet's revisions as stored (one this round made is not).
    pub stored: &'a [ControllerRevision],
}

/// Makes or deletes the jobs. A failure is said and left for the next
/// round, never the round's: scaling and updating do not wait on it.
pub(crate) async fn sync(
    client: &Client,
    cloneset: &CloneSet,
    revisions: &Revisions,
    marks: RevisionMarks<'_>,
) {
    if let Err(error) = try_sync(client, cloneset, revisions, &marks).await {
        tracing::warn!(cloneset = %cloneset.name_any(), %error, "image pre-download");
    }
}

async fn try_sync(
    client: &Client,
    cloneset: &CloneSet,
    revisions: &Revisions,
    marks: &RevisionMarks<'_>,
) -> Result<(), ReconcileError> {
    let updated_ready = cloneset
        .status
        .as_ref()
        .map_or(0, |s| s.updated_ready_replicas);
    let namespace = cloneset.namespace().unwrap_or_default();
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), &namespace);
    match plan(cloneset, revisions, marks.stored, updated_ready) {
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
            mark(marks, &revisions.update, Some("true")).await
        }
        Predownload::Done => {
            let uid = cloneset.uid().unwrap_or_default();
            // Metadata only: a job our types cannot read is still deleted.
            let listed = jobs
                .list_metadata(&ListParams::default())
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
            for revision in marks.stored.iter().filter(|r| has_label(r, CREATED_LABEL)) {
                mark(marks, &revision.name_any(), None).await?;
            }
            Ok(())
        }
    }
}

/// Puts [`CREATED_LABEL`] on revision `name` (`Some`) or takes it off.
async fn mark(
    marks: &RevisionMarks<'_>,
    name: &str,
    value: Option<&str>,
) -> Result<(), ReconcileError> {
    let patch = json!({"metadata": {"labels": {CREATED_LABEL: value}}});
    let marked = marks
        .api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(ReconcileError::api(format!("mark revision {name}")))?;
    marks.written.wrote(&marked);
    Ok(())
}
