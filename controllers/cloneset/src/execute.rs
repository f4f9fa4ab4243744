//! Performing a plan's writes, in the order the planner means them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::CloneSet;
use kruise_controller_runtime::random::random_u64;
use kruise_core::cloneset::claims::plan_claims;
use kruise_core::cloneset::in_place_apply::{
    apply_graced_patch, lifecycle_patch, ready_status_patch, start_status_patch, update_patch,
};
use kruise_core::cloneset::new_pod::{new_claims, new_instance_ids, new_pod};
use kruise_core::cloneset::{
    CONDITION_IN_PLACE_UPDATE_READY, LABEL_INSTANCE_ID, LABEL_POD_TEMPLATE_HASH,
    LABEL_SPECIFIED_DELETE, Plan, Revisions,
};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use kruise_controller_runtime::api_error::{is_already_exists, is_not_found};
use kruise_controller_runtime::context::Context;

use super::reconcile::ReconcileError;

pub(crate) async fn execute(
    context: &Context,
    cloneset: &CloneSet,
    pods: &[Pod],
    revisions: &Revisions,
    plan: &Plan,
    now: Timestamp,
) -> Result<(), ReconcileError> {
    let namespace = cloneset.namespace().unwrap_or_default();
    let pod_api: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let writer = Writer {
        context,
        cloneset,
        pods: &pod_api,
    };

    let claims = writer.list_claims().await?;
    let claim_plan = plan_claims(cloneset, pods, &claims, &plan.delete);
    let mut ids = InstanceIds::new(pods, &claims, claim_plan.reusable_ids);
    writer.create_pods(&mut ids, revisions, plan, now).await?;
    for name in &plan.delete {
        match pod_api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                writer
                    .event("SuccessfulDelete", &format!("succeed to delete pod {name}"))
                    .await;
            }
            Err(error) if is_not_found(&error) => {}
            Err(error) => return Err(ReconcileError::api(format!("delete pod {name}"))(error)),
        }
    }
    writer.delete_claims(&claim_plan.delete).await?;
    for name in &plan.mark_specified_delete {
        writer
            .patch(
                name,
                json!({"metadata": {"labels": {LABEL_SPECIFIED_DELETE: "true"}}}),
            )
            .await?;
    }
    for change in &plan.lifecycle {
        writer
            .patch(&change.pod, lifecycle_patch(change.to))
            .await?;
        if change.mark_not_ready {
            let not_ready = json!({"status": {"conditions": [{"type": "KruisePodReady", "status": "False", "lastTransitionTime": now.to_string()}]}});
            writer.patch_status(&change.pod, not_ready).await?;
        }
    }
    for update in &plan.in_place_update {
        let Some(pod) = pods.iter().find(|p| p.name_any() == update.pod) else {
            continue;
        };
        // The status write bumps the resourceVersion the update patch
        // checks, so the patch is built from the pod it returns.
        let started;
        let pod = if has_in_place_gate(pod) {
            started = writer
                .patch_status(&update.pod, start_status_patch(now))
                .await?;
            &started
        } else {
            pod
        };
        writer
            .patch(&update.pod, update_patch(pod, &update.spec, now))
            .await?;
        writer
            .event(
                "SuccessfulUpdatePodInPlace",
                &format!("successfully update pod {} in-place", update.pod),
            )
            .await;
    }
    for name in &plan.apply_graced {
        if let Some(patch) = pods
            .iter()
            .find(|p| &p.name_any() == name)
            .and_then(apply_graced_patch)
        {
            writer.patch(name, patch).await?;
        }
    }
    for completion in &plan.in_place_complete {
        writer
            .patch_status(&completion.pod, ready_status_patch(now))
            .await?;
        if let Some(to) = completion.to {
            writer.patch(&completion.pod, lifecycle_patch(to)).await?;
        }
    }
    for (name, hash) in &plan.template_hash_fix {
        writer
            .patch(
                name,
                json!({"metadata": {"labels": {LABEL_POD_TEMPLATE_HASH: hash}}}),
            )
            .await?;
    }
    if plan.scale_up_limited {
        writer
            .warning(
                "ScaleUpLimited",
                "scale up limited by maxUnavailable of the scale strategy",
            )
            .await;
    }
    Ok(())
}

/// The ids new pods take: those whose claims wait for a pod first, then
/// fresh ones unique among every pod's and claim's.
struct InstanceIds {
    reusable: std::vec::IntoIter<String>,
    taken: BTreeSet<String>,
}

impl InstanceIds {
    fn new(pods: &[Pod], claims: &[PersistentVolumeClaim], reusable: Vec<String>) -> Self {
        let pod_ids = pods.iter().map(|p| p.labels().get(LABEL_INSTANCE_ID));
        let claim_ids = claims.iter().map(|c| c.labels().get(LABEL_INSTANCE_ID));
        Self {
            reusable: reusable.into_iter(),
            taken: pod_ids.chain(claim_ids).flatten().cloned().collect(),
        }
    }

    fn next(&mut self, count: usize) -> Vec<String> {
        let mut ids: Vec<String> = self.reusable.by_ref().take(count).collect();
        let fresh = new_instance_ids(&self.taken, count - ids.len(), &mut || {
            u32::try_from(random_u64() >> 32).unwrap_or(0)
        });
        self.taken.extend(fresh.iter().cloned());
        ids.extend(fresh);
        ids
    }
}

struct Writer<'a> {
    context: &'a Context,
    cloneset: &'a CloneSet,
    pods: &'a Api<Pod>,
}

impl Writer<'_> {
    async fn create_pods(
        &self,
        ids: &mut InstanceIds,
        revisions: &Revisions,
        plan: &Plan,
        now: Timestamp,
    ) -> Result<(), ReconcileError> {
        let cloneset = self.cloneset;
        for creation in &plan.create {
            let Some(template) = revisions.template_of(&creation.revision) else {
                continue;
            };
            let count = usize::try_from(creation.count).unwrap_or(0);
            for id in ids.next(count) {
                self.create_claims(&new_claims(cloneset, &id)).await?;
                let pod = new_pod(cloneset, &creation.revision, template, &id, now);
                self.pods
                    .create(&PostParams::default(), &pod)
                    .await
                    .map_err(ReconcileError::api(format!(
                        "create pod {}",
                        pod.name_any()
                    )))?;
                self.event(
                    "SuccessfulCreate",
                    &format!("succeed to create pod {}", pod.name_any()),
                )
                .await;
            }
        }
        Ok(())
    }

    async fn patch(&self, pod: &str, patch: Value) -> Result<(), ReconcileError> {
        self.pods
            .patch(pod, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
            .map_err(ReconcileError::api(format!("patch pod {pod}")))
    }

    async fn patch_status(&self, pod: &str, patch: Value) -> Result<Pod, ReconcileError> {
        self.pods
            .patch_status(pod, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map_err(ReconcileError::api(format!(
                "patch the status of pod {pod}"
            )))
    }

    /// The claims carrying an instance id in the CloneSet's namespace (none
    /// listed when it has no claim templates).
    async fn list_claims(&self) -> Result<Vec<PersistentVolumeClaim>, ReconcileError> {
        if self.cloneset.spec.volume_claim_templates.is_empty() {
            return Ok(Vec::new());
        }
        self.claims_api()
            .list(&ListParams::default().labels(LABEL_INSTANCE_ID))
            .await
            .map(|list| list.items)
            .map_err(ReconcileError::api("list claims"))
    }

    async fn delete_claims(&self, names: &[String]) -> Result<(), ReconcileError> {
        for name in names {
            match self
                .claims_api()
                .delete(name, &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    self.event("SuccessfulDelete", &format!("succeed to delete pvc {name}"))
                        .await;
                }
                Err(error) if is_not_found(&error) => {}
                Err(error) => {
                    return Err(ReconcileError::api(format!("delete claim {name}"))(error));
                }
            }
        }
        Ok(())
    }

    fn claims_api(&self) -> Api<PersistentVolumeClaim> {
        let namespace = self.cloneset.namespace().unwrap_or_default();
        Api::namespaced(self.context.client.clone(), &namespace)
    }

    async fn create_claims(&self, claims: &[PersistentVolumeClaim]) -> Result<(), ReconcileError> {
        let api = self.claims_api();
        for claim in claims {
            match api.create(&PostParams::default(), claim).await {
                Ok(_) => {}
                // A claim of a recreated instance is reused.
                Err(error) if is_already_exists(&error) => {}
                Err(error) => {
                    return Err(ReconcileError::api(format!(
                        "create claim {}",
                        claim.name_any()
                    ))(error));
                }
            }
        }
        Ok(())
    }

    async fn event(&self, reason: &str, note: &str) {
        let reference = self.cloneset.object_ref(&());
        self.context
            .events
            .normal(&reference, reason, reason, note)
            .await;
    }

    async fn warning(&self, reason: &str, note: &str) {
        let reference = self.cloneset.object_ref(&());
        self.context
            .events
            .warning(&reference, reason, reason, note)
            .await;
    }
}

fn has_in_place_gate(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.readiness_gates.iter().flatten())
        .any(|g| g.condition_type == CONDITION_IN_PLACE_UPDATE_READY)
}
