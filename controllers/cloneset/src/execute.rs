//! Performing a plan's writes, in the order the planner means them.

use std::collections::BTreeSet;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::CloneSet;
use kruise_controller_runtime::random::random_u64;
use kruise_core::cloneset::claims::plan_claims;
use kruise_core::cloneset::in_place_apply::{
    apply_graced_patch, lifecycle_patch, lifecycle_patch_restoring, ready_status_patch,
    start_status_patch, still_as_planned, update_patch,
};
use kruise_core::cloneset::new_pod::{new_claims, new_instance_ids, new_pod};
use kruise_core::cloneset::{
    CONDITION_IN_PLACE_UPDATE_READY, InPlaceUpdate, LABEL_INSTANCE_ID, LABEL_POD_TEMPLATE_HASH,
    LABEL_SPECIFIED_DELETE, LifecycleChange, Plan, Revisions, hold_before_move, is_active,
};
use kruise_core::pod_readiness;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use kruise_controller_runtime::api_error::{is_already_exists, is_not_found};
use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::expectations::OwnerWrites;

use super::reconcile::ReconcileError;

/// How often an in-place update's patch is tried when it meets conflicts.
const IN_PLACE_ATTEMPTS: u32 = 4;

/// What the round read that its writes act on.
#[derive(Clone, Copy)]
pub(crate) struct Observed<'a> {
    pub pods: &'a [Pod],
    /// Every claim with an instance id in the namespace.
    pub claims: &'a [PersistentVolumeClaim],
    /// Instance ids of pods outside the selection that bear a claim's name.
    pub held_elsewhere: &'a BTreeSet<String>,
}

/// Where the round's writes are noted, for the reads of later rounds.
#[derive(Clone, Copy)]
pub(crate) struct Writes<'a> {
    pub pods: OwnerWrites<'a>,
    pub claims: OwnerWrites<'a>,
}

pub(crate) async fn execute(
    context: &Context,
    written: Writes<'_>,
    cloneset: &CloneSet,
    observed: Observed<'_>,
    revisions: &Revisions,
    plan: &Plan,
    now: Timestamp,
) -> Result<(), ReconcileError> {
    let namespace = cloneset.namespace().unwrap_or_default();
    let pod_api: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let writer = Writer {
        context,
        written: written.pods,
        claims_written: written.claims,
        cloneset,
        pods: &pod_api,
    };
    let Observed {
        pods,
        claims,
        held_elsewhere,
    } = observed;

    let claim_plan = plan_claims(cloneset, pods, claims, &plan.delete, held_elsewhere);
    let mut ids = InstanceIds::new(pods, claims, claim_plan.reusable_ids);
    writer.create_pods(&mut ids, revisions, plan, now).await?;
    writer.delete_pods(&plan.delete, pods).await?;
    writer.delete_claims(&claim_plan.delete, claims).await?;
    let read = |name: &str| pods.iter().find(|p| p.name_any() == name);
    // First, on the versions read: a later write to the same pod this
    // round would make these conflicts.
    for change in &plan.readiness {
        if let Some(pod) = read(&change.pod) {
            let patch = pod_readiness::status_patch(pod, &change.condition, now);
            writer.patch_status(&change.pod, patch).await?;
        }
    }
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
            .move_lifecycle(change, read(&change.pod), now)
            .await?;
    }
    for update in &plan.in_place_update {
        let Some(pod) = read(&update.pod) else {
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
        writer.update_in_place(pod, update, now).await?;
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
        if let Some(pod) = read(&completion.pod) {
            writer
                .patch_status(&completion.pod, ready_status_patch(pod, completion, now))
                .await?;
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
        // As in the claim plan: a terminating pod's id is free again.
        let pod_ids = pods
            .iter()
            .filter(|p| is_active(p))
            .map(|p| p.labels().get(LABEL_INSTANCE_ID));
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
    written: OwnerWrites<'a>,
    claims_written: OwnerWrites<'a>,
    cloneset: &'a CloneSet,
    pods: &'a Api<Pod>,
}

impl Writer<'_> {
    /// Creates the plan's pods in slow-start batches of 1, 2, 4, ... pods
    /// at once, as OpenKruise (and Kubernetes' ReplicaSets) do: a cluster
    /// that refuses one pod (a quota, a webhook) is asked once, not for
    /// every pod, and one that accepts them is not asked one at a time.
    async fn create_pods(
        &self,
        ids: &mut InstanceIds,
        revisions: &Revisions,
        plan: &Plan,
        now: Timestamp,
    ) -> Result<(), ReconcileError> {
        let cloneset = self.cloneset;
        let mut wanted = Vec::new();
        for creation in &plan.create {
            let Some(template) = revisions.template_of(&creation.revision) else {
                continue;
            };
            let count = usize::try_from(creation.count).unwrap_or(0);
            for id in ids.next(count) {
                let pod = new_pod(cloneset, &creation.revision, template, &id, now);
                wanted.push((id, pod));
            }
        }
        let mut rest = wanted.as_slice();
        for size in slow_start_batches(wanted.len()) {
            let (batch, later) = rest.split_at(size);
            let created = join_all(batch.iter().map(|(id, pod)| self.create_pod(id, pod))).await;
            if let Some(error) = created.into_iter().find_map(Result::err) {
                // The first batch is one pod: refused, nothing was made.
                let first = rest.len() == wanted.len();
                return Err(if first {
                    ReconcileError::NothingCreated(Box::new(error))
                } else {
                    error
                });
            }
            rest = later;
        }
        Ok(())
    }

    async fn create_pod(&self, id: &str, pod: &Pod) -> Result<(), ReconcileError> {
        self.create_claims(&new_claims(self.cloneset, id)).await?;
        let created = match self.pods.create(&PostParams::default(), pod).await {
            Ok(created) => created,
            Err(error) => {
                // Where a user looks first (`kubectl describe`): a quota or
                // an admission webhook refusing pods is said on the CloneSet.
                let note = format!("failed to create pod {}: {error}", pod.name_any());
                self.warning("FailedCreate", &note).await;
                return Err(ReconcileError::api(format!(
                    "create pod {}",
                    pod.name_any()
                ))(error));
            }
        };
        self.written.wrote(&created);
        self.event(
            "SuccessfulCreate",
            &format!("succeed to create pod {}", pod.name_any()),
        )
        .await;
        Ok(())
    }

    async fn delete_pods(&self, names: &[String], pods: &[Pod]) -> Result<(), ReconcileError> {
        for name in names {
            let uid = pods
                .iter()
                .find(|p| &p.name_any() == name)
                .and_then(ResourceExt::uid);
            match self.pods.delete(name, &DeleteParams::default()).await {
                Ok(answer) => {
                    self.written.deleted(uid.as_deref(), answer.as_ref().left());
                    self.event("SuccessfulDelete", &format!("succeed to delete pod {name}"))
                        .await;
                }
                Err(error) if is_not_found(&error) => {}
                Err(error) => return Err(ReconcileError::api(format!("delete pod {name}"))(error)),
            }
        }
        Ok(())
    }

    async fn patch(&self, pod: &str, patch: Value) -> Result<(), ReconcileError> {
        let patched = self
            .pods
            .patch(pod, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map_err(ReconcileError::api(format!("patch pod {pod}")))?;
        self.written.wrote(&patched);
        Ok(())
    }

    /// Step 2 of an in-place update. Its patch carries the resourceVersion
    /// it was built from; on a conflict the pod is read again and, if it is
    /// still the one planned (`still_as_planned`), the patch is built again,
    /// as OpenKruise retries. Without this, the kubelet's answer to step 1
    /// failed most updates at scale: one pod updated per round.
    async fn update_in_place(
        &self,
        planned: &Pod,
        update: &InPlaceUpdate,
        now: Timestamp,
    ) -> Result<(), ReconcileError> {
        let mut pod = std::borrow::Cow::Borrowed(planned);
        for attempt in 1..=IN_PLACE_ATTEMPTS {
            match self
                .patch(&update.pod, update_patch(&pod, &update.spec, now))
                .await
            {
                Err(error) if error.is_conflict() && attempt < IN_PLACE_ATTEMPTS => {
                    let fresh = self
                        .pods
                        .get(&update.pod)
                        .await
                        .map_err(ReconcileError::api(format!("read pod {}", update.pod)))?;
                    if !still_as_planned(planned, &fresh) {
                        // Moved on under us: the next round plans from what is there.
                        return Ok(());
                    }
                    pod = std::borrow::Cow::Owned(fresh);
                }
                result => return result,
            }
        }
        Ok(())
    }

    /// A lifecycle move: the pod held not-ready first when the move asks
    /// for it, then the label (with the inPlaceUpdate hook put back when
    /// the move asks for that).
    async fn move_lifecycle(
        &self,
        change: &LifecycleChange,
        pod: Option<&Pod>,
        now: Timestamp,
    ) -> Result<(), ReconcileError> {
        let hold = pod
            .filter(|_| change.mark_not_ready)
            .and_then(|pod| hold_before_move(pod, change.to, now));
        if let Some(hold) = hold {
            self.patch_status(&change.pod, hold).await?;
        }
        let spec = &self.cloneset.spec;
        let hook = spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.in_place_update.as_ref());
        let patch = match hook.filter(|_| change.restore_hook) {
            Some(hook) => lifecycle_patch_restoring(change.to, hook),
            None => lifecycle_patch(change.to),
        };
        self.patch(&change.pod, patch).await
    }

    async fn patch_status(&self, pod: &str, patch: Value) -> Result<Pod, ReconcileError> {
        let patched = self
            .pods
            .patch_status(pod, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map_err(ReconcileError::api(format!(
                "patch the status of pod {pod}"
            )))?;
        self.written.wrote(&patched);
        Ok(patched)
    }

    async fn delete_claims(
        &self,
        names: &[String],
        claims: &[PersistentVolumeClaim],
    ) -> Result<(), ReconcileError> {
        for name in names {
            let uid = claims
                .iter()
                .find(|c| &c.name_any() == name)
                .and_then(ResourceExt::uid);
            match self
                .claims_api()
                .delete(name, &DeleteParams::default())
                .await
            {
                Ok(answer) => {
                    self.claims_written
                        .deleted(uid.as_deref(), answer.as_ref().left());
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
                Ok(created) => self.claims_written.wrote(&created),
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

/// The most pods created at once. OpenKruise's client-side rate limit
/// plays this part; without one, a batch of hundreds would meet the API
/// server's own limit on requests in flight (429s).
const MOST_AT_ONCE: usize = 64;

/// The sizes of the slow-start batches that create `count` pods: 1, 2, 4,
/// ... up to [`MOST_AT_ONCE`], the last one what is left.
fn slow_start_batches(count: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut left = count;
    let mut next = 1;
    while left > 0 {
        let size = next.min(left);
        sizes.push(size);
        left -= size;
        next = (next * 2).min(MOST_AT_ONCE);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::{MOST_AT_ONCE, slow_start_batches};

    #[test]
    fn pods_are_created_in_doubling_batches() {
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1), [1]);
        assert_eq!(slow_start_batches(2), [1, 1]);
        assert_eq!(slow_start_batches(10), [1, 2, 4, 3]);
        let sizes = slow_start_batches(2000);
        assert_eq!(sizes.iter().sum::<usize>(), 2000);
        assert_eq!(sizes[..7], [1, 2, 4, 8, 16, 32, 64]);
        assert!(sizes.iter().all(|&size| size <= MOST_AT_ONCE), "{sizes:?}");
        // 127 in the first seven, then 29 of 64 and 17 left.
        assert_eq!(sizes.len(), 7 + 29 + 1);
        assert_eq!(sizes.last(), Some(&17));
    }
}
