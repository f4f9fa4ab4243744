//! One reconcile round (spec 03 §5): read, plan, write, record status.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::{CloneSet, Stored};
use kruise_core::cloneset::revision::{RevisionWrite, plan_revisions};
use kruise_core::cloneset::{FeatureGates, PlanInput, compute_status, plan};
use kruise_core::owner::is_controlled_by;
use kruise_core::selector::to_selector_string;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use kruise_controller_runtime::status::replace_status;

use super::execute::execute;
use super::{CONTROLLER_NAME, Context};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("the CloneSet has no namespace or uid")]
    Incomplete,
}

impl ReconcileError {
    pub fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Api { what, source }
    }

    /// Someone else wrote first: plan again from what is there now.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Api { source: kube::Error::Api(status), .. } if status.code == 409)
    }
}

pub(crate) async fn reconcile(
    stored: Arc<Stored<CloneSet>>,
    context: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let cloneset = match &stored.object {
        Ok(cloneset) => cloneset,
        Err(reason) => {
            // Nothing can be planned until someone fixes it; say why, once
            // per change of the object.
            tracing::warn!(cloneset = stored.name(), %reason, "cannot read the CloneSet; skipped");
            let note = format!("cannot read this CloneSet, so it is not reconciled: {reason}");
            context
                .events
                .warning(&stored.object_ref(&()), "InvalidSpec", "Reconcile", &note)
                .await;
            return Ok(Action::await_change());
        }
    };
    reconcile_cloneset(cloneset, &context).await
}

async fn reconcile_cloneset(
    cloneset: &CloneSet,
    context: &Context,
) -> Result<Action, ReconcileError> {
    let (Some(namespace), Some(uid)) = (cloneset.namespace(), cloneset.uid()) else {
        return Err(ReconcileError::Incomplete);
    };
    if cloneset.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let client = &context.client;
    let selector = to_selector_string(&cloneset.spec.selector);
    let owned = ListParams::default().labels(&selector);
    let pods: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), &namespace)
        .list(&owned)
        .await
        .map_err(ReconcileError::api("list pods"))?
        .items
        .into_iter()
        .filter(|pod| is_controlled_by(&pod.metadata, &uid))
        .collect();
    let revision_api = Api::<ControllerRevision>::namespaced(client.clone(), &namespace);
    let revisions: Vec<ControllerRevision> = revision_api
        .list(&owned)
        .await
        .map_err(ReconcileError::api("list revisions"))?
        .items
        .into_iter()
        .filter(|revision| is_controlled_by(&revision.metadata, &uid))
        .collect();

    let revision_plan = plan_revisions(cloneset, &revisions, &pods);
    match &revision_plan.write {
        RevisionWrite::None => {}
        RevisionWrite::Create(revision) => {
            revision_api
                .create(&PostParams::default(), revision)
                .await
                .map_err(ReconcileError::api("create the update revision"))?;
        }
        RevisionWrite::Bump { name, revision } => {
            revision_api
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "revision": revision })),
                )
                .await
                .map_err(ReconcileError::api(format!("bump revision {name}")))?;
        }
    }

    crate::predownload::sync(client, cloneset, &revision_plan.revisions).await?;

    let now = Timestamp::now();
    let input = PlanInput {
        cloneset,
        pods: &pods,
        revisions: &revision_plan.revisions,
        now,
        gates: FeatureGates::default(),
    };
    let round = plan(&input);
    execute(
        context,
        cloneset,
        &pods,
        &revision_plan.revisions,
        &round,
        now,
    )
    .await?;

    let mut status = compute_status(
        cloneset,
        &pods,
        &revision_plan.revisions,
        cloneset.status.as_ref(),
        now,
    );
    status.collision_count = Some(revision_plan.collision_count);
    if cloneset.status.as_ref() != Some(&status) {
        let api = Api::<CloneSet>::namespaced(client.clone(), &namespace);
        let mut updated = cloneset.clone();
        updated.status = Some(status);
        // Stale: the CloneSet's watch event brings the newer one next.
        replace_status(&api, &updated, CONTROLLER_NAME)
            .await
            .map_err(ReconcileError::api("write status"))?;
    }
    for name in &revision_plan.delete {
        match revision_api.delete(name, &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(error) => return Err(ReconcileError::api("truncate history")(error)),
        }
    }

    let requeue = round
        .requeue_after_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(Duration::from_secs(30), |s| Duration::from_secs(s.max(1)));
    Ok(Action::requeue(requeue))
}
