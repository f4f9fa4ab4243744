//! Image pre-download for an in-place rollout: makes the ImagePullJobs
//! [`kruise_core::cloneset::predownload::plan`] asks for (owned by the
//! CloneSet, so they go with it) and deletes them once the rollout is
//! over. The ImagePullJob controller and the node agents do the pulls.

use kruise_api::{CloneSet, ImagePullJob};
use kruise_controller_runtime::api_error::{is_already_exists, is_not_found};
use kruise_core::cloneset::Revisions;
use kruise_core::cloneset::predownload::{Predownload, plan};
use kruise_core::owner::is_controlled_by;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::reconcile::ReconcileError;

pub(crate) async fn sync(
    client: &Client,
    cloneset: &CloneSet,
    revisions: &Revisions,
) -> Result<(), ReconcileError> {
    let updated_ready = cloneset
        .status
        .as_ref()
        .map_or(0, |s| s.updated_ready_replicas);
    let namespace = cloneset.namespace().unwrap_or_default();
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), &namespace);
    match plan(cloneset, revisions, updated_ready) {
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
            Ok(())
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
            Ok(())
        }
    }
}
