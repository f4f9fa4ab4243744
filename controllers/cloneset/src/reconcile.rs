//! One reconcile round (spec 03 §5): read, plan, write, record status.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::crd::STORAGE_VERSION;
use kruise_api::{CloneSet, Stored};
use kruise_core::cloneset::claims::handed_to_released_pod;
use kruise_core::cloneset::progress::{
    find_progressing, progress_deadline, requeue_seconds_from_condition,
};
use kruise_core::cloneset::revision::{RevisionPlan, RevisionWrite, plan_revisions};
use kruise_core::cloneset::{
    CONDITION_FAILED_SCALE, CONDITION_FAILED_UPDATE, FeatureGates, Plan, PlanInput, Stage,
    compute_status, note_failure, plan, plan_after_refused_creates, pruned_pods_to_delete,
};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use kruise_controller_runtime::api_error;
use kruise_controller_runtime::expectations::OwnerWrites;
use kruise_controller_runtime::status::replace_status;
use kruise_core::owner::{is_controlled_by, is_orphan, release_patch};

use super::CONTROLLER_NAME;
use super::execute::{Observed, Writes, execute};
use super::predownload::RevisionMarks;
use super::reads::{self, CloneSetContext, Owned};

/// How long a round waits for the pod and revision watches to show its
/// CloneSet's last writes (their watch events usually start the next
/// round sooner).
const STORE_WAIT: Duration = Duration::from_secs(1);
/// A round comes back after this long unless it has a reason to sooner.
const RESYNC_SECONDS: i64 = 30;
/// How many names a round tries for its update revision.
const REVISION_ATTEMPTS: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("the CloneSet has no namespace or uid")]
    Incomplete,
    #[error("the CloneSet's selector: {0}")]
    Selector(String),
    #[error("every name tried for the update revision is taken by other data")]
    RevisionNames,
    #[error("revision {0} is held by another controller: waiting for it to go")]
    RevisionHeld(String),
    /// The Scale pass's first create was refused: no pod was made.
    #[error(transparent)]
    NothingCreated(Box<ReconcileError>),
}

impl ReconcileError {
    pub fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Api { what, source }
    }

    /// Someone else wrote first: plan again from what is there now.
    pub fn is_conflict(&self) -> bool {
        match self {
            Self::Api { source, .. } => api_error::is_conflict(source),
            Self::NothingCreated(inner) => inner.is_conflict(),
            _ => false,
        }
    }
}

pub(crate) async fn reconcile(
    stored: Arc<Stored<CloneSet>>,
    context: Arc<CloneSetContext>,
) -> Result<Action, ReconcileError> {
    let cloneset = match &stored.object {
        Ok(cloneset) => cloneset,
        Err(reason) => {
            // Nothing can be planned until someone fixes it; say why, once
            // per change of the object.
            tracing::warn!(cloneset = stored.name(), %reason, "cannot read the CloneSet; skipped");
            let note = format!("cannot read this CloneSet, so it is not reconciled: {reason}");
            context
                .shared
                .events
                .warning(&stored.object_ref(&()), "InvalidSpec", "Reconcile", &note)
                .await;
            return Ok(Action::await_change());
        }
    };
    let action = reconcile_cloneset(cloneset, &context).await?;
    context.shared.backoff.reset(&key(&*stored));
    Ok(action)
}

/// `namespace/name`: the CloneSet's key in the retry backoff and the
/// expectations.
pub(crate) fn key(cloneset: &impl ResourceExt) -> String {
    format!(
        "{}/{}",
        cloneset.namespace().unwrap_or_default(),
        cloneset.name_any()
    )
}

async fn reconcile_cloneset(
    cloneset: &CloneSet,
    context: &CloneSetContext,
) -> Result<Action, ReconcileError> {
    let (Some(namespace), Some(uid)) = (cloneset.namespace(), cloneset.uid()) else {
        return Err(ReconcileError::Incomplete);
    };
    let key = key(cloneset);
    if cloneset.metadata.deletion_timestamp.is_some() {
        // Going: no later round of it reads its notes.
        context.pods.forget(&key);
        context.revisions.forget(&key);
        context.claims.forget(&key);
        return Ok(Action::await_change());
    }
    let Some(owned) = reads::read(context, cloneset, &namespace, &uid, &key).await? else {
        tracing::debug!(cloneset = key, "waiting for the watches to show our writes");
        return Ok(Action::requeue(STORE_WAIT));
    };
    let written = context.pods.writes_of(&key);
    let revisions_written = context.revisions.writes_of(&key);
    let claims_written = context.claims.writes_of(&key);
    let context = &context.shared;
    let client = &context.client;
    let written = Writes {
        pods: written,
        claims: claims_written,
    };
    if tidy(client, cloneset, &uid, &owned, written).await? {
        return Ok(Action::requeue(STORE_WAIT));
    }
    let Owned {
        pods,
        mut revisions,
        claims,
        held_elsewhere,
        ..
    } = owned;
    let revision_api = Api::<ControllerRevision>::namespaced(client.clone(), &namespace);
    let revision_plan = sync_revisions(
        &revision_api,
        revisions_written,
        cloneset,
        &mut revisions,
        &pods,
    )
    .await?;

    let marks = RevisionMarks {
        api: &revision_api,
        written: revisions_written,
        stored: &revisions,
    };
    crate::predownload::sync(client, cloneset, &revision_plan.revisions, marks).await;

    let now = Timestamp::now();
    let input = PlanInput {
        cloneset,
        pods: &pods,
        revisions: &revision_plan.revisions,
        now,
        gates: FeatureGates::default(),
    };
    let round = plan(&input);
    tracing::debug!(
        cloneset = key,
        pods = pods.len(),
        create = round.create.len(),
        delete = round.delete.len(),
        lifecycle = round.lifecycle.len(),
        in_place_update = round.in_place_update.len(),
        in_place_complete = round.in_place_complete.len(),
        "round planned"
    );
    let observed = Observed {
        pods: &pods,
        claims: &claims,
        held_elsewhere: &held_elsewhere,
    };
    let resolved = &revision_plan.revisions;
    let executed = execute(context, written, cloneset, observed, resolved, &round, now).await;
    let mut failures: Vec<_> = failure(&round, executed.as_ref().err())
        .into_iter()
        .collect();
    if let Err(ReconcileError::NothingCreated(_)) = &executed {
        let update = plan_after_refused_creates(&input);
        let updated = execute(context, written, cloneset, observed, resolved, &update, now).await;
        failures.extend(failure(&update, updated.as_ref().err()));
    }
    // The status is written whether or not a pass failed (a refused create
    // must not freeze observedGeneration and the counts), with the failures
    // in its conditions.
    let progress_due = write_status(client, cloneset, &pods, &revision_plan, now, failures).await?;
    executed?;
    truncate_history(
        &revision_api,
        revisions_written,
        &revisions,
        &revision_plan.delete,
    )
    .await?;

    // Back when the plan asks (a pod turning available) or in 30 s, and
    // sooner if the progress deadline comes first (so that
    // ProgressDeadlineExceeded is set on time).
    let planned = round.requeue_after_seconds.unwrap_or(RESYNC_SECONDS);
    let due = progress_due.map_or(planned, |d| d.min(planned));
    let requeue = Duration::from_secs(u64::try_from(due).unwrap_or(0).max(1));
    Ok(Action::requeue(requeue))
}

/// What a round writes before it plans, if anything; then it ends, and
/// the next one plans from what the watches show of these writes.
async fn tidy(
    client: &kube::Client,
    cloneset: &CloneSet,
    uid: &str,
    owned: &Owned,
    written: Writes<'_>,
) -> Result<bool, ReconcileError> {
    if let Some(kept) = pruned_pods_to_delete(cloneset, &owned.pods) {
        // Before any pod is made: a replacement that reuses a gone pod's
        // instance id has its name, and must not find it on the list.
        prune_pods_to_delete(client, cloneset, &kept).await?;
        return Ok(true);
    }
    if owned.strays.is_empty() {
        return Ok(false);
    }
    // The claims read are stale after it: the replacements wait.
    let namespace = cloneset.namespace().unwrap_or_default();
    release(
        client,
        written,
        &namespace,
        uid,
        &owned.strays,
        &owned.claims,
    )
    .await?;
    Ok(true)
}

/// Releases pods the CloneSet controls but no longer selects (spec 03 §3):
/// their claims are handed to them first, then their owner reference goes,
/// so deleting the CloneSet leaves them, and the next round (which never
/// counted them) makes their replacements, under new instance ids. A pod or
/// claim written or deleted meanwhile is left to the next round.
async fn release(
    client: &kube::Client,
    written: Writes<'_>,
    namespace: &str,
    owner_uid: &str,
    strays: &[Pod],
    claims: &[PersistentVolumeClaim],
) -> Result<(), ReconcileError> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let claim_api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace);
    let params = PatchParams::default();
    for pod in strays {
        for (claim, patch) in handed_to_released_pod(owner_uid, pod, claims) {
            let handed = claim_api.patch(&claim, &params, &Patch::Merge(patch)).await;
            let what = format!("hand claim {claim} to its pod");
            match api_error::raced(handed).map_err(ReconcileError::api(what))? {
                Some(handed) => written.claims.wrote(&handed),
                None => return Ok(()),
            }
        }
        let name = pod.name_any();
        let patch = release_patch(&pod.metadata, owner_uid);
        let released = pods.patch(&name, &params, &Patch::Merge(patch)).await;
        let what = format!("release pod {name}");
        if let Some(released) = api_error::raced(released).map_err(ReconcileError::api(what))? {
            written.pods.wrote(&released);
        }
    }
    Ok(())
}

/// The condition a round's failure sets and its message (spec 03 §1.3):
/// FailedScale when the Scale pass wrote, FailedUpdate for the Update pass
/// or an update the plan could not make. A conflict is none: someone wrote
/// first, and the next round plans again at once.
fn failure(round: &Plan, error: Option<&ReconcileError>) -> Option<(&'static str, String)> {
    let condition = if round.stage == Stage::Scale {
        CONDITION_FAILED_SCALE
    } else {
        CONDITION_FAILED_UPDATE
    };
    match error {
        Some(error) if !error.is_conflict() => Some((condition, error.to_string())),
        Some(_) => None,
        None => round
            .errors
            .first()
            .map(|e| (CONDITION_FAILED_UPDATE, e.to_string())),
    }
}

/// Writes the status the round's pods and revisions give, with `failures`
/// noted, if it changed; returns the seconds left until its progress
/// deadline, if one runs.
async fn write_status(
    client: &kube::Client,
    cloneset: &CloneSet,
    pods: &[Pod],
    revision_plan: &RevisionPlan,
    now: Timestamp,
    failures: Vec<(&str, String)>,
) -> Result<Option<i64>, ReconcileError> {
    let mut status = compute_status(
        cloneset,
        pods,
        &revision_plan.revisions,
        cloneset.status.as_ref(),
        now,
    );
    status.collision_count = Some(revision_plan.collision_count);
    for (condition, message) in failures {
        note_failure(&mut status, condition, &message, now);
    }
    let progress_due = progress_deadline(cloneset).and_then(|deadline| {
        requeue_seconds_from_condition(find_progressing(&status), deadline, now)
    });
    if cloneset.status.as_ref() == Some(&status) {
        return Ok(progress_due);
    }
    let namespace = cloneset.namespace().unwrap_or_default();
    let api = Api::<CloneSet>::namespaced(client.clone(), &namespace);
    let mut updated = cloneset.clone();
    updated.status = Some(status);
    // Stale: the CloneSet's watch event brings the newer one next.
    replace_status(&api, &updated, CONTROLLER_NAME)
        .await
        .map_err(ReconcileError::api("write status"))?;
    Ok(progress_due)
}

/// Writes `scaleStrategy.podsToDelete` as `kept`, on the version read: a
/// user's edit in between is a conflict, and the next round prunes what
/// is listed then. Written in v1beta1 (the field is spelt alike in both),
/// as OpenKruise's controller writes: the webhooks judge a write by its
/// version's rules, and v1alpha1's refuse what v1beta1's take (OnDelete),
/// which would leave a CloneSet made in v1beta1 unable to prune.
async fn prune_pods_to_delete(
    client: &kube::Client,
    cloneset: &CloneSet,
    kept: &[String],
) -> Result<(), ReconcileError> {
    let v1beta1 = ApiResource {
        group: CloneSet::group(&()).into_owned(),
        version: STORAGE_VERSION.to_owned(),
        api_version: format!("{}/{STORAGE_VERSION}", CloneSet::group(&())),
        kind: CloneSet::kind(&()).into_owned(),
        plural: CloneSet::plural(&()).into_owned(),
    };
    let namespace = cloneset.namespace().unwrap_or_default();
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &v1beta1);
    let list = if kept.is_empty() {
        json!(null)
    } else {
        json!(kept)
    };
    let patch = json!({
        "metadata": {"resourceVersion": cloneset.metadata.resource_version},
        "spec": {"scaleStrategy": {"podsToDelete": list}},
    });
    api.patch(
        &cloneset.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map_err(ReconcileError::api("prune scaleStrategy.podsToDelete"))
    .map(drop)
}

/// Deletes the revisions the plan let go of, noting each delete.
async fn truncate_history(
    revision_api: &Api<ControllerRevision>,
    written: OwnerWrites<'_>,
    revisions: &[ControllerRevision],
    names: &[String],
) -> Result<(), ReconcileError> {
    for name in names {
        let uid = revisions
            .iter()
            .find(|r| r.metadata.name.as_ref() == Some(name))
            .and_then(|r| r.metadata.uid.as_deref());
        match revision_api.delete(name, &DeleteParams::default()).await {
            Ok(answer) => written.deleted(uid, answer.as_ref().left()),
            Err(kube::Error::Api(_)) => {}
            Err(error) => return Err(ReconcileError::api("truncate history")(error)),
        }
    }
    Ok(())
}

/// Makes the update revision exist among the CloneSet's `revisions` (a
/// few: the history limit), noting the write. A name found taken on
/// create is read: one the CloneSet may take (its own, or an orphan a
/// watch had not shown yet) joins `revisions` and the plan is made again
/// (the same data taken as it is, other data moved to the next name); one
/// another controller holds (a CloneSet of the same name still being
/// deleted) is waited for, with backoff, until it goes.
async fn sync_revisions(
    revision_api: &Api<ControllerRevision>,
    written: OwnerWrites<'_>,
    cloneset: &CloneSet,
    known: &mut Vec<ControllerRevision>,
    pods: &[Pod],
) -> Result<RevisionPlan, ReconcileError> {
    let uid = cloneset.uid().unwrap_or_default();
    for _ in 0..REVISION_ATTEMPTS {
        let revision_plan = plan_revisions(cloneset, known, pods);
        match &revision_plan.write {
            RevisionWrite::None => {}
            RevisionWrite::Create(revision) => {
                match revision_api.create(&PostParams::default(), revision).await {
                    Ok(created) => written.wrote(&created),
                    Err(error) if api_error::is_already_exists(&error) => {
                        let name = revision.metadata.name.as_deref().unwrap_or_default();
                        let found = revision_api
                            .get(name)
                            .await
                            .map_err(ReconcileError::api(format!("read revision {name}")))?;
                        if !is_controlled_by(&found.metadata, &uid) && !is_orphan(&found.metadata) {
                            return Err(ReconcileError::RevisionHeld(name.to_owned()));
                        }
                        known.retain(|r| r.metadata.name != found.metadata.name);
                        known.push(found);
                        continue;
                    }
                    Err(error) => {
                        return Err(ReconcileError::api("create the update revision")(error));
                    }
                }
            }
            RevisionWrite::Bump { name, revision } => {
                let bumped = revision_api
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "revision": revision })),
                    )
                    .await
                    .map_err(ReconcileError::api(format!("bump revision {name}")))?;
                written.wrote(&bumped);
            }
        }
        return Ok(revision_plan);
    }
    Err(ReconcileError::RevisionNames)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kruise_controller_runtime::context::Context;
    use kruise_controller_runtime::testing::{
        FakeApi, FedWatch, Seen, condition, container_images,
    };

    use kruise_controller_runtime::shared::SharedWatch;

    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use kruise_controller_runtime::expectations::WatchReads;
    use kruise_core::cloneset::{LABEL_INSTANCE_ID, LABEL_LIFECYCLE_STATE, LABEL_REVISION};
    use kube::api::ListParams;
    use serde_json::Value;

    use super::*;

    const CLONESET: &str = "/apis/apps.kruise.io/v1alpha1/namespaces/default/clonesets/demo";
    const PODS: &str = "/api/v1/namespaces/default/pods";
    const REVISIONS: &str = "/apis/apps/v1/namespaces/default/controllerrevisions";

    fn cloneset(replicas: u32, image: &str, strategy: &str) -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
            "metadata": {"name": "demo", "namespace": "default", "uid": "cs-uid", "generation": 1},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "demo"}},
                "template": {
                    "metadata": {"labels": {"app": "demo"}},
                    "spec": {"containers": [{"name": "main", "image": image},
                                            {"name": "log", "image": "log:1"}]},
                },
                "updateStrategy": {"type": strategy, "maxUnavailable": 1},
            },
        })
    }

    /// A context that reads pods and revisions from these watches, or
    /// from the API server where there is none.
    fn context(
        api: &FakeApi,
        pods: Option<&SharedWatch<Pod>>,
        revisions: Option<&SharedWatch<ControllerRevision>>,
    ) -> Arc<CloneSetContext> {
        Arc::new(CloneSetContext {
            shared: Context::new(api.client(), CONTROLLER_NAME),
            pods: pods.map_or_else(WatchReads::api_only, |w| WatchReads::from_watch(w.clone())),
            revisions: revisions
                .map_or_else(WatchReads::api_only, |w| WatchReads::from_watch(w.clone())),
            claims: WatchReads::api_only(),
        })
    }

    async fn round_in(api: &FakeApi, context: &Arc<CloneSetContext>) -> Action {
        let stored: Stored<CloneSet> = serde_json::from_value(api.get(CLONESET).unwrap()).unwrap();
        reconcile(Arc::new(stored), Arc::clone(context))
            .await
            .unwrap()
    }

    async fn round(api: &FakeApi) -> Action {
        round_in(api, &context(api, None, None)).await
    }

    /// Method and path of each write but events (best effort), the pods'
    /// names replaced by `pod`.
    fn writes(seen: &[Seen]) -> Vec<String> {
        seen.iter()
            .filter(|s| s.method != "GET" && !s.path.contains("/events"))
            .map(|s| {
                let path = match s.path.strip_prefix(&format!("{PODS}/")) {
                    Some(rest) => {
                        let sub = rest.split_once('/').map(|(_, sub)| format!("/{sub}"));
                        format!("{PODS}/pod{}", sub.unwrap_or_default())
                    }
                    None => s.path.clone(),
                };
                format!("{} {path}", s.method)
            })
            .collect()
    }

    /// The writes to pods among `seen`, as [`writes`] names them.
    fn pod_writes(seen: &[Seen]) -> Vec<String> {
        writes(seen)
            .into_iter()
            .filter(|w| w.contains(PODS))
            .collect()
    }

    async fn pods(api: &FakeApi) -> Vec<Value> {
        listed::<Pod>(api)
            .await
            .into_iter()
            .map(|pod| serde_json::to_value(pod).unwrap())
            .collect()
    }

    /// Marks every pod Running and Ready, as a kubelet would.
    async fn make_ready(api: &FakeApi) {
        let pods_api = Api::<Pod>::namespaced(api.client(), "default");
        for pod in pods(api).await {
            let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
            let status = json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
            pods_api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await
                .unwrap();
        }
    }

    /// A CloneSet of two pods, created and ready, after a settled round.
    async fn two_ready_pods(strategy: &str) -> FakeApi {
        let api = FakeApi::default();
        api.insert("clonesets", cloneset(2, "nginx:1", strategy));
        round(&api).await;
        make_ready(&api).await;
        round(&api).await;
        api
    }

    /// The user's image change of the main container (generation 2).
    async fn new_main_image(api: &FakeApi) {
        let containers =
            json!([{"name": "main", "image": "nginx:2"}, {"name": "log", "image": "log:1"}]);
        set_spec(
            api,
            &json!({"template": {"spec": {"containers": containers}}}),
            2,
        )
        .await;
    }

    /// The user's edit: `spec` merged into the CloneSet's, a new generation.
    async fn set_spec(api: &FakeApi, spec: &Value, generation: i64) {
        let mut stored = api.get(CLONESET).unwrap();
        json_patch_merge(&mut stored["spec"], spec);
        stored["metadata"]["generation"] = json!(generation);
        let object: CloneSet = serde_json::from_value(stored).unwrap();
        Api::<CloneSet>::namespaced(api.client(), "default")
            .replace("demo", &PostParams::default(), &object)
            .await
            .unwrap();
    }

    fn json_patch_merge(target: &mut Value, patch: &Value) {
        if let (Value::Object(fields), Value::Object(patched)) = (&mut *target, patch) {
            for (key, value) in patched {
                json_patch_merge(fields.entry(key.clone()).or_insert(Value::Null), value);
            }
        } else {
            *target = patch.clone();
        }
    }

    #[tokio::test]
    async fn a_new_cloneset_gets_a_revision_its_pods_and_a_status() {
        let api = FakeApi::default();
        api.insert("clonesets", cloneset(2, "nginx:1", "ReCreate"));

        round(&api).await;

        let revisions = "/apis/apps/v1/namespaces/default/controllerrevisions";
        assert_eq!(
            writes(&api.seen()),
            [
                format!("POST {revisions}"),
                format!("POST {PODS}"),
                format!("POST {PODS}"),
                format!("PUT {CLONESET}/status"),
            ]
        );
        let created = pods(&api).await;
        assert_eq!(created.len(), 2);
        let revision = api.seen()[..]
            .iter()
            .find(|s| s.method == "POST" && s.path == revisions)
            .map(|s| s.body["metadata"]["name"].as_str().unwrap().to_owned())
            .unwrap();
        for pod in &created {
            let labels = &pod["metadata"]["labels"];
            assert_eq!(labels["app"], "demo");
            assert_eq!(labels[LABEL_REVISION], revision.as_str());
            let id = labels[LABEL_INSTANCE_ID].as_str().unwrap();
            assert_eq!(pod["metadata"]["name"], format!("demo-{id}"));
            let owner = &pod["metadata"]["ownerReferences"][0];
            assert_eq!(
                (&owner["uid"], &owner["controller"]),
                (&json!("cs-uid"), &json!(true))
            );
        }
        let status = &api.get(CLONESET).unwrap()["status"];
        assert_eq!(status["observedGeneration"], 1);
        assert_eq!(status["updateRevision"], revision.as_str());
    }

    #[tokio::test]
    async fn a_scale_in_deletes_one_pod_and_a_settled_round_writes_nothing() {
        let api = two_ready_pods("ReCreate").await;
        let before = api.seen().len();
        round(&api).await;
        assert_eq!(
            writes(&api.seen()[before..]),
            Vec::<String>::new(),
            "settled"
        );

        set_spec(&api, &json!({"replicas": 1}), 2).await;
        let before = api.seen().len();
        round(&api).await;

        assert_eq!(
            writes(&api.seen()[before..]),
            [
                format!("DELETE {PODS}/pod"),
                format!("PUT {CLONESET}/status")
            ]
        );
        assert_eq!(pods(&api).await.len(), 1);
        assert_eq!(
            api.get(CLONESET).unwrap()["status"]["observedGeneration"],
            2
        );
    }

    /// Names of pods that are gone leave `podsToDelete` before anything
    /// else is written, the others stay; a user's edit in between wins.
    #[tokio::test]
    async fn names_of_gone_pods_leave_pods_to_delete_first() {
        let api = two_ready_pods("ReCreate").await;
        let live = pods(&api).await[0]["metadata"]["name"].clone();
        set_spec(
            &api,
            &json!({"scaleStrategy": {"podsToDelete": ["demo-gone", live]}}),
            2,
        )
        .await;
        let stale = api.get(CLONESET).unwrap();
        let before = api.seen().len();
        round(&api).await;
        // In v1beta1, as OpenKruise writes it (v1alpha1's webhook rules
        // refuse what v1beta1's take).
        let in_v1beta1 = CLONESET.replace("/v1alpha1/", "/v1beta1/");
        assert_eq!(
            writes(&api.seen()[before..]),
            [format!("PATCH {in_v1beta1}")]
        );
        let stored = api.get(CLONESET).unwrap();
        assert_eq!(
            stored["spec"]["scaleStrategy"]["podsToDelete"],
            json!([live])
        );

        // A round on a copy from before a user's edit writes nothing over it.
        set_spec(
            &api,
            &json!({"scaleStrategy": {"podsToDelete": ["demo-gone"]}}),
            3,
        )
        .await;
        let edited = api.get(CLONESET).unwrap();
        let copy: Stored<CloneSet> = serde_json::from_value(stale).unwrap();
        let raced = reconcile(Arc::new(copy), context(&api, None, None)).await;
        assert!(raced.is_err_and(|e| e.is_conflict()));
        assert_eq!(api.get(CLONESET).unwrap(), edited);
    }

    /// A cluster that refuses new pods (a quota) hears of it on the
    /// CloneSet: a FailedCreate event, the FailedScale condition, and a
    /// status that still follows the spec's generation.
    #[tokio::test]
    async fn a_refused_create_is_reported_and_the_status_still_written() {
        let api = FakeApi::default();
        api.insert("clonesets", cloneset(2, "nginx:1", "ReCreate"));
        api.refuse("POST", "pods");
        let stored: Stored<CloneSet> = serde_json::from_value(api.get(CLONESET).unwrap()).unwrap();
        let failed = reconcile(Arc::new(stored), context(&api, None, None)).await;
        assert!(failed.is_err_and(|e| e.to_string().contains("exceeded quota")));
        let reported = api
            .writes()
            .into_iter()
            .any(|w| w.body["reason"] == "FailedCreate");
        assert!(reported, "no FailedCreate event");
        let status = &api.get(CLONESET).unwrap()["status"];
        assert_eq!(status["observedGeneration"], 1);
        let conditions = status["conditions"].as_array().unwrap();
        let failed_scale: Vec<&Value> = conditions
            .iter()
            .filter(|c| c["type"] == "FailedScale")
            .collect();
        assert_eq!(failed_scale.len(), 1, "{conditions:?}");
        assert_eq!(failed_scale[0]["status"], "True");
        assert!(
            failed_scale[0]["message"]
                .as_str()
                .unwrap()
                .contains("exceeded quota")
        );
    }

    /// A scale-out the cluster refuses does not hold the rollout back: as
    /// in OpenKruise, the round goes on to the Update pass.
    #[tokio::test]
    async fn a_refused_scale_out_leaves_the_round_to_the_update() {
        let api = two_ready_pods("InPlaceIfPossible").await;
        set_spec(&api, &json!({"updateStrategy": {"maxSurge": 1}}), 2).await;
        new_main_image(&api).await;
        api.refuse("POST", "pods");
        let stored: Stored<CloneSet> = serde_json::from_value(api.get(CLONESET).unwrap()).unwrap();
        let failed = reconcile(Arc::new(stored), context(&api, None, None)).await;
        assert!(failed.is_err_and(|e| e.to_string().contains("exceeded quota")));
        let images: Vec<Vec<String>> = pods(&api).await.iter().map(container_images).collect();
        assert_eq!(images.len(), 2);
        assert!(
            images.contains(&vec!["main=nginx:2".to_owned(), "log=log:1".to_owned()]),
            "{images:?}"
        );
    }

    #[tokio::test]
    async fn an_in_place_update_patches_one_container_image_and_keeps_the_others() {
        let api = two_ready_pods("InPlaceIfPossible").await;

        new_main_image(&api).await;
        let before = api.seen().len();
        round(&api).await;

        let patched: Vec<String> = writes(&api.seen()[before..])
            .into_iter()
            .filter(|w| w.starts_with("PATCH"))
            .collect();
        assert!(!patched.is_empty(), "{:?}", writes(&api.seen()[before..]));
        let images: Vec<Vec<String>> = pods(&api).await.iter().map(container_images).collect();
        // maxUnavailable 1: one pod at a time, in place (no pod deleted),
        // its other container untouched.
        assert!(
            images.contains(&vec!["main=nginx:2".to_owned(), "log=log:1".to_owned()]),
            "{images:?}"
        );
        assert!(
            images.contains(&vec!["main=nginx:1".to_owned(), "log=log:1".to_owned()]),
            "{images:?}"
        );
        assert_eq!(images.len(), 2);
        // Unready (the gate, and Ready with it) before its image changed.
        assert_eq!(
            patched[..2],
            [
                format!("PATCH {PODS}/pod/status"),
                format!("PATCH {PODS}/pod")
            ]
        );
        let updated = pods(&api)
            .await
            .into_iter()
            .find(|pod| container_images(pod)[0] == "main=nginx:2")
            .unwrap();
        let status_and_reason = |type_: &str| {
            let found = condition(&updated, type_);
            (found["status"].clone(), found["reason"].clone())
        };
        assert_eq!(
            status_and_reason("InPlaceUpdateReady"),
            (json!("False"), json!("StartInPlaceUpdate"))
        );
        assert_eq!(
            status_and_reason("Ready"),
            (json!("False"), json!("ReadinessGatesNotReady"))
        );
    }

    /// A new pod with OpenKruise's `KruisePodReady` gate (the pod webhook
    /// gives it) is opened with its `InPlaceUpdateReady` gate, once
    /// scheduled, in one status write per pod.
    #[tokio::test]
    async fn a_new_pods_two_gates_open_in_one_write() {
        let api = FakeApi::default();
        let mut gated = cloneset(2, "nginx:1", "ReCreate");
        gated["spec"]["template"]["spec"]["readinessGates"] =
            json!([{"conditionType": "KruisePodReady"}]);
        api.insert("clonesets", gated);
        round(&api).await;
        let pods_api = Api::<Pod>::namespaced(api.client(), "default");
        for pod in pods(&api).await {
            let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
            let scheduled = json!({"spec": {"nodeName": "node-1"}});
            pods_api
                .patch(&name, &PatchParams::default(), &Patch::Merge(scheduled))
                .await
                .unwrap();
        }
        let before = api.seen().len();
        round(&api).await;
        let pod_writes = pod_writes(&api.seen()[before..]);
        assert_eq!(pod_writes, vec![format!("PATCH {PODS}/pod/status"); 2]);
        for pod in pods(&api).await {
            assert_eq!(
                condition(&pod, "InPlaceUpdateReady")["status"],
                "True",
                "{pod}"
            );
            assert_eq!(condition(&pod, "KruisePodReady")["status"], "True", "{pod}");
        }
    }

    /// An `Updated` pod to be updated again gets the inPlaceUpdate hook's
    /// label back with its move to PreparingUpdate, and keeps its image
    /// until the hook's owner lets it go.
    #[tokio::test]
    async fn an_updated_pod_gets_its_hook_back_before_another_update() {
        let api = FakeApi::default();
        let mut hooked = cloneset(1, "nginx:1", "InPlaceIfPossible");
        hooked["spec"]["lifecycle"] = json!({"inPlaceUpdate": {"labelsHandler": {"hook": "on"}}});
        api.insert("clonesets", hooked);
        round(&api).await;
        make_ready(&api).await;
        let name = pods(&api).await[0]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        let pods_api = Api::<Pod>::namespaced(api.client(), "default");
        let updated = json!({"metadata": {"labels": {LABEL_LIFECYCLE_STATE: "Updated"}}});
        pods_api
            .patch(&name, &PatchParams::default(), &Patch::Merge(updated))
            .await
            .unwrap();

        new_main_image(&api).await;
        // The first round opens the in-place gate the fake kubelet's
        // status write dropped; the second moves the pod.
        round(&api).await;
        round(&api).await;
        let pod = &pods(&api).await[0];
        let labels = &pod["metadata"]["labels"];
        assert_eq!(
            (&labels[LABEL_LIFECYCLE_STATE], &labels["hook"]),
            (&json!("PreparingUpdate"), &json!("on"))
        );
        assert_eq!(container_images(pod)[0], "main=nginx:1");
    }

    /// A preDelete hook with `markPodNotReady`: the pod scaled in is held
    /// not-ready (a `KruisePodReady` holder, on the version read) before
    /// it moves to PreparingDelete, and the hold is written once.
    #[tokio::test]
    async fn a_marking_pre_delete_hook_holds_the_pod_before_it_moves() {
        let api = FakeApi::default();
        let mut hooked = cloneset(2, "nginx:1", "ReCreate");
        hooked["spec"]["template"]["metadata"]["labels"]["hook"] = json!("true");
        hooked["spec"]["template"]["spec"]["readinessGates"] =
            json!([{"conditionType": "KruisePodReady"}]);
        hooked["spec"]["lifecycle"] =
            json!({"preDelete": {"labelsHandler": {"hook": "true"}, "markPodNotReady": true}});
        api.insert("clonesets", hooked);
        round(&api).await;
        make_ready(&api).await;
        round(&api).await;

        set_spec(&api, &json!({"replicas": 1}), 2).await;
        let before = api.seen().len();
        round(&api).await;
        let pod_writes = pod_writes(&api.seen()[before..]);
        assert_eq!(
            pod_writes,
            [
                format!("PATCH {PODS}/pod/status"),
                format!("PATCH {PODS}/pod")
            ]
        );
        let hold_write = api.seen()[before..]
            .iter()
            .find(|s| s.path.ends_with("/status") && s.path.contains(PODS))
            .map(|s| s.body.clone())
            .unwrap();
        assert!(
            hold_write["metadata"]["resourceVersion"].is_string(),
            "{hold_write}"
        );
        let preparing = pods(&api)
            .await
            .into_iter()
            .find(|p| p["metadata"]["labels"][LABEL_LIFECYCLE_STATE] == "PreparingDelete")
            .unwrap();
        let held = condition(&preparing, "KruisePodReady");
        assert_eq!(held["status"], "False");
        assert_eq!(
            held["message"],
            r#"[{"userAgent":"Lifecycle","key":"preDeleteHook"}]"#
        );

        let before = api.seen().len();
        round(&api).await;
        let holds = api.seen()[before..]
            .iter()
            .filter(|s| s.path.contains(PODS) && s.body.to_string().contains("KruisePodReady"))
            .count();
        assert_eq!(holds, 0, "held once");
    }

    /// A rollout under a progress deadline comes back at the deadline,
    /// not at the next resync, so that ProgressDeadlineExceeded is set on
    /// time; without one, at the resync.
    #[tokio::test]
    async fn a_round_comes_back_at_the_progress_deadline() {
        let api = two_ready_pods("ReCreate").await;
        assert_eq!(round(&api).await, Action::requeue(Duration::from_secs(30)));
        set_spec(&api, &json!({"progressDeadlineSeconds": 5}), 2).await;
        new_main_image(&api).await;
        let action = round(&api).await;
        let progressing = &api.get(CLONESET).unwrap()["status"]["conditions"];
        assert_eq!(
            action,
            Action::requeue(Duration::from_secs(5)),
            "{progressing}"
        );
    }

    #[tokio::test]
    async fn an_in_place_update_survives_the_kubelets_answer_to_its_status_write() {
        let api = two_ready_pods("InPlaceIfPossible").await;
        let gated = pods(&api)
            .await
            .iter()
            .filter(|pod| !pod["spec"]["readinessGates"].is_null())
            .count();
        assert_eq!(gated, 2, "the pods carry the InPlaceUpdateReady gate");

        new_main_image(&api).await;
        // The status write that starts the update moves the pod's
        // resourceVersion twice, so the update patch built from its answer
        // meets a conflict and must read the pod again.
        api.set_kubelet_answers(true);
        let before = api.seen().len();
        round(&api).await;

        let seen = &api.seen()[before..];
        let rereads = seen
            .iter()
            .filter(|s| s.method == "GET" && s.path.starts_with(&format!("{PODS}/")))
            .count();
        assert_eq!(rereads, 1, "{:?}", writes(seen));
        let images: Vec<Vec<String>> = pods(&api).await.iter().map(container_images).collect();
        assert!(
            images.contains(&vec!["main=nginx:2".to_owned(), "log=log:1".to_owned()]),
            "{images:?}"
        );
    }

    /// The objects of the default namespace the fake API server holds.
    async fn listed<K>(api: &FakeApi) -> Vec<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        Api::<K>::namespaced(api.client(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    fn lists_of_pods(seen: &[Seen]) -> usize {
        seen.iter()
            .filter(|s| s.method == "GET" && s.path == PODS)
            .count()
    }

    #[tokio::test]
    async fn rounds_read_the_pod_watch_and_wait_until_it_shows_their_writes() {
        let api = FakeApi::default();
        api.insert("clonesets", cloneset(2, "nginx:1", "ReCreate"));
        let pod_watch = FedWatch::<Pod>::listed([]).await;
        let context = context(&api, Some(&pod_watch.watch), None);
        let round = || round_in(&api, &context);

        round().await;
        assert_eq!(pods(&api).await.len(), 2, "created from an empty store");
        waits_without_a_request(
            &api,
            &context,
            "the store lacks the new pods: no request, nothing created twice",
        )
        .await;
        let before = api.seen().len();

        pod_watch.apply(listed(&api).await).await;
        assert_ne!(round().await, Action::requeue(STORE_WAIT));
        let seen = api.seen();
        let created_again = writes(&seen[before..])
            .into_iter()
            .filter(|w| w == &format!("POST {PODS}"))
            .count();
        assert_eq!(created_again, 0, "planned from the store, which has both");
        assert_eq!(lists_of_pods(&seen), 2, "only the test's own lists");
    }

    /// A CloneSet as given, read through a pod watch, after its first round:
    /// the API, the watch, the context and the first pod as created.
    async fn first_round_with_pod_watch(
        cloneset: Value,
    ) -> (FakeApi, FedWatch<Pod>, Arc<CloneSetContext>, Value) {
        let api = FakeApi::default();
        api.insert("clonesets", cloneset);
        let pod_watch = FedWatch::<Pod>::listed([]).await;
        let context = context(&api, Some(&pod_watch.watch), None);
        round_in(&api, &context).await;
        let first = pods(&api).await[0].clone();
        (api, pod_watch, context, first)
    }

    /// The user's relabel that takes pod `name` out of the selector.
    async fn relabel_out_of_service(api: &FakeApi, name: &str) {
        let relabel = json!({"metadata": {"labels": {"app": "debugging"}}});
        Api::<Pod>::namespaced(api.client(), "default")
            .patch(name, &PatchParams::default(), &Patch::Merge(relabel))
            .await
            .unwrap();
    }

    /// A pod relabelled out of the selector is released (its owner
    /// reference goes, on the version read) and replaced in the next round;
    /// a pod of another owner is left alone.
    #[tokio::test]
    async fn a_pod_the_selector_no_longer_matches_is_released_and_replaced() {
        let (api, pod_watch, context, first) =
            first_round_with_pod_watch(cloneset(2, "nginx:1", "ReCreate")).await;
        let stray = first["metadata"]["name"].as_str().unwrap().to_owned();
        relabel_out_of_service(&api, &stray).await;
        let mut foreign = pods(&api).await[1].clone();
        foreign["metadata"]["name"] = json!("foreign");
        foreign["metadata"]["labels"]["app"] = json!("debugging");
        foreign["metadata"]["ownerReferences"][0]["uid"] = json!("other-uid");
        api.insert("pods", foreign);
        pod_watch.apply(listed(&api).await).await;

        let before = api.seen().len();
        assert_eq!(round_in(&api, &context).await, Action::requeue(STORE_WAIT));
        pod_watch.apply(listed(&api).await).await;
        round_in(&api, &context).await;
        let released = api.seen()[before..]
            .iter()
            .find(|s| s.method == "PATCH" && s.path.ends_with(&format!("/{stray}")))
            .map(|s| s.body.clone())
            .unwrap();
        assert!(released["metadata"]["resourceVersion"].is_string());
        let stored = api.get(&format!("{PODS}/{stray}")).unwrap();
        assert_eq!(stored["metadata"]["ownerReferences"], json!([]));
        let other = api.get(&format!("{PODS}/foreign")).unwrap();
        assert_eq!(other["metadata"]["ownerReferences"][0]["uid"], "other-uid");
        let created = writes(&api.seen()[before..])
            .into_iter()
            .filter(|w| w == &format!("POST {PODS}"))
            .count();
        assert_eq!(created, 1, "a replacement for the released pod");
    }

    /// With claim templates, a released pod takes its claims along: its
    /// replacement gets a new instance id (and so a name of its own)
    /// instead of the released pod's id and name, which would be refused.
    #[tokio::test]
    async fn a_released_pod_takes_its_claims_and_its_replacement_a_new_id() {
        let (api, pod_watch, context, stray) = first_round_with_pod_watch(claimed()).await;
        let name = stray["metadata"]["name"].as_str().unwrap().to_owned();
        let id = stray["metadata"]["labels"][LABEL_INSTANCE_ID]
            .as_str()
            .unwrap()
            .to_owned();
        relabel_out_of_service(&api, &name).await;
        pod_watch.apply(listed(&api).await).await;

        assert_eq!(round_in(&api, &context).await, Action::requeue(STORE_WAIT));
        pod_watch.apply(listed(&api).await).await;
        round_in(&api, &context).await;
        let claim = api
            .get(&format!(
                "/api/v1/namespaces/default/persistentvolumeclaims/data-demo-{id}"
            ))
            .unwrap();
        let owners = &claim["metadata"]["ownerReferences"];
        assert_eq!(owners.as_array().unwrap().len(), 1, "{owners}");
        assert_eq!(
            (&owners[0]["kind"], &owners[0]["name"]),
            (&json!("Pod"), &json!(name))
        );
        let all = pods(&api).await;
        assert_eq!(all.len(), 3, "the released pod and two of the CloneSet's");
        let ids: Vec<&str> = all
            .iter()
            .filter_map(|p| p["metadata"]["labels"][LABEL_INSTANCE_ID].as_str())
            .filter(|i| *i == id)
            .collect();
        assert_eq!(ids.len(), 1, "only the released pod has its id");
    }

    /// A CloneSet of two pods with a claim template `data`.
    fn claimed() -> Value {
        let mut claimed = cloneset(2, "nginx:1", "ReCreate");
        claimed["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}]);
        claimed
    }

    /// [`claimed`], with `disablePVCReuse`.
    fn claimed_without_reuse() -> Value {
        let mut claimed = claimed();
        claimed["spec"]["scaleStrategy"] = json!({"disablePVCReuse": true});
        claimed
    }

    fn claim_deletes(seen: &[Seen]) -> usize {
        writes(seen)
            .iter()
            .filter(|w| w.starts_with("DELETE") && w.contains("persistentvolumeclaims"))
            .count()
    }

    /// Read from the API server (no watch to trust), a pod relabelled out
    /// of the selector is not in the LIST: its claims looked like a gone
    /// pod's and, with disablePVCReuse, were deleted under it. It is found
    /// by the name its claims give, and released with them.
    #[tokio::test]
    async fn a_stray_read_from_the_api_server_keeps_its_claims() {
        let api = FakeApi::default();
        api.insert("clonesets", claimed_without_reuse());
        round(&api).await;
        let stray = pods(&api).await[0].clone();
        let name = stray["metadata"]["name"].as_str().unwrap().to_owned();
        relabel_out_of_service(&api, &name).await;

        assert_eq!(round(&api).await, Action::requeue(STORE_WAIT));
        round(&api).await;
        assert_eq!(claim_deletes(&api.seen()), 0);
        let stored = api.get(&format!("{PODS}/{name}")).unwrap();
        assert_eq!(stored["metadata"]["ownerReferences"], json!([]));
        let id = stray["metadata"]["labels"][LABEL_INSTANCE_ID]
            .as_str()
            .unwrap();
        let claim = format!("/api/v1/namespaces/default/persistentvolumeclaims/data-demo-{id}");
        let owner = &api.get(&claim).unwrap()["metadata"]["ownerReferences"][0];
        assert_eq!(
            (&owner["kind"], &owner["name"]),
            (&json!("Pod"), &json!(name))
        );
        assert_eq!(pods(&api).await.len(), 3, "the released pod and two");
    }

    /// A pod someone took from the CloneSet (its owner reference and its
    /// instance-id label removed) still mounts its claims: they are neither
    /// deleted nor given to a new pod, which would have its name.
    #[tokio::test]
    async fn claims_a_pod_taken_from_the_cloneset_mounts_stay() {
        let (api, pod_watch, context, first) =
            first_round_with_pod_watch(claimed_without_reuse()).await;
        let taken = first["metadata"]["name"].as_str().unwrap().to_owned();
        let orphaned = json!({"metadata": {"ownerReferences": [],
                                           "labels": {LABEL_INSTANCE_ID: null}}});
        Api::<Pod>::namespaced(api.client(), "default")
            .patch(&taken, &PatchParams::default(), &Patch::Merge(orphaned))
            .await
            .unwrap();
        pod_watch.apply(listed(&api).await).await;

        let before = api.seen().len();
        round_in(&api, &context).await;
        assert_eq!(claim_deletes(&api.seen()[before..]), 0);
        assert_eq!(pods(&api).await.len(), 3, "the taken pod and two");
    }

    /// A round that waits for the watches and sends nothing.
    async fn waits_without_a_request(api: &FakeApi, context: &Arc<CloneSetContext>, why: &str) {
        let before = api.seen().len();
        assert_eq!(
            round_in(api, context).await,
            Action::requeue(STORE_WAIT),
            "{why}"
        );
        assert_eq!(api.seen().len(), before, "{why}");
    }

    fn revision_requests(seen: &[Seen]) -> Vec<String> {
        seen.iter()
            .filter(|s| s.path.starts_with(REVISIONS))
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }

    /// Revisions come from the watch once it shows the round's own
    /// revision writes: no LIST per round, and a round on a store without
    /// the new revision, or still with the one it deleted, waits instead
    /// of writing anything again.
    #[tokio::test]
    async fn rounds_read_revisions_from_the_watch_once_it_has_their_writes() {
        let api = FakeApi::default();
        let mut demo = cloneset(2, "nginx:1", "ReCreate");
        demo["spec"]["revisionHistoryLimit"] = json!(0);
        api.insert("clonesets", demo);
        // An earlier template's revision, used by no pod: the limit drops it.
        let old = api.insert(
            "controllerrevisions",
            json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                   "metadata": {"name": "demo-old", "namespace": "default", "uid": "old-uid",
                                "labels": {"app": "demo"},
                                "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1",
                                    "kind": "CloneSet", "name": "demo", "uid": "cs-uid",
                                    "controller": true}]},
                   "revision": 1, "data": {"spec": {"template": {}}}}),
        );
        let old: ControllerRevision = serde_json::from_value(old).unwrap();
        let pod_watch = FedWatch::<Pod>::listed([]).await;
        let revision_watch = FedWatch::listed([old.clone()]).await;
        let context = context(&api, Some(&pod_watch.watch), Some(&revision_watch.watch));
        let round = || round_in(&api, &context);

        round().await;
        let written = [
            format!("POST {REVISIONS}"),
            format!("DELETE {REVISIONS}/demo-old"),
        ];
        assert_eq!(
            revision_requests(&api.seen()),
            written,
            "planned from the store, without a LIST"
        );
        // The pods arrive: only the revision store is behind now.
        pod_watch.apply(listed(&api).await).await;
        waits_without_a_request(
            &api,
            &context,
            "the store lacks both revision writes: no request at all",
        )
        .await;

        // The new revision arrives first: the deleted one is still there.
        let revisions: Vec<ControllerRevision> = listed(&api).await;
        revision_watch.apply(revisions).await;
        waits_without_a_request(&api, &context, "still waiting for the delete").await;

        revision_watch.delete(old).await;
        assert_ne!(round().await, Action::requeue(STORE_WAIT));
        let mut expected = written.to_vec();
        expected.push(format!("GET {REVISIONS}"));
        assert_eq!(
            revision_requests(&api.seen()),
            expected,
            "nothing more than the test's own LIST"
        );
    }

    /// A round on a revision store that lacks the revision the last round
    /// created waits rather than creating it again.
    #[tokio::test]
    async fn a_round_waits_for_the_watch_to_show_the_revision_it_created() {
        let api = FakeApi::default();
        api.insert("clonesets", cloneset(2, "nginx:1", "ReCreate"));
        let pod_watch = FedWatch::<Pod>::listed([]).await;
        let revision_watch = FedWatch::listed([]).await;
        let context = context(&api, Some(&pod_watch.watch), Some(&revision_watch.watch));

        round_in(&api, &context).await;
        assert_eq!(
            revision_requests(&api.seen()),
            [format!("POST {REVISIONS}")]
        );
        pod_watch.apply(listed(&api).await).await;
        waits_without_a_request(&api, &context, "no request, nothing created twice").await;
    }

    /// The revision a new CloneSet would create, stored beforehand under
    /// another controller (`Some(uid)`) or none: one left by a CloneSet of
    /// the same name, still being deleted or deleted with
    /// `--cascade=orphan`. Returns the API and the revision's name.
    fn revision_left_behind(controller: Option<&str>) -> (FakeApi, String) {
        let api = FakeApi::default();
        let created = api.insert("clonesets", cloneset(2, "nginx:1", "ReCreate"));
        let typed: CloneSet = serde_json::from_value(created).unwrap();
        let RevisionWrite::Create(mut left) = plan_revisions(&typed, &[], &[]).write else {
            panic!("a CloneSet without revisions creates one");
        };
        for reference in left.metadata.owner_references.iter_mut().flatten() {
            match controller {
                Some(uid) => uid.clone_into(&mut reference.uid),
                None => reference.controller = None,
            }
        }
        let name = left.metadata.name.clone().unwrap();
        api.insert("controllerrevisions", serde_json::to_value(&left).unwrap());
        (api, name)
    }

    /// Every pod of the round carries the revision `name`, the only one.
    async fn all_pods_on(api: &FakeApi, name: &str) {
        let pods = pods(api).await;
        assert_eq!(pods.len(), 2);
        for pod in &pods {
            assert_eq!(pod["metadata"]["labels"]["controller-revision-hash"], name);
        }
        assert_eq!(listed::<ControllerRevision>(api).await.len(), 1);
    }

    /// An orphaned revision the selector matches is read as the
    /// CloneSet's, as Kubernetes' revision history lists them, and taken.
    #[tokio::test]
    async fn an_orphaned_revision_of_the_same_template_is_taken() {
        let (api, name) = revision_left_behind(None);

        round(&api).await;

        assert_eq!(revision_requests(&api.seen()), [format!("GET {REVISIONS}")]);
        all_pods_on(&api, &name).await;
    }

    /// A revision under the update revision's name that another controller
    /// holds (a CloneSet of the same name still being deleted) is not
    /// taken, bumped or deleted: the round fails, saying so, and is retried
    /// with backoff until the revision goes.
    #[tokio::test]
    async fn a_revision_another_controller_holds_under_the_name_is_waited_for() {
        let (api, name) = revision_left_behind(Some("old-cloneset-uid"));
        let stored: Stored<CloneSet> = serde_json::from_value(api.get(CLONESET).unwrap()).unwrap();

        let outcome = reconcile(Arc::new(stored), context(&api, None, None)).await;

        assert!(
            matches!(&outcome, Err(ReconcileError::RevisionHeld(held)) if *held == name),
            "{outcome:?}"
        );
        assert_eq!(
            revision_requests(&api.seen()),
            [
                format!("GET {REVISIONS}"),
                format!("POST {REVISIONS}"),
                format!("GET {REVISIONS}/{name}")
            ]
        );
        assert!(pods(&api).await.is_empty());
    }

    /// An orphaned revision the revision watch has not shown yet: found on
    /// the create's 409, read, and taken.
    #[tokio::test]
    async fn an_orphaned_revision_the_watch_lacks_is_read_after_the_409_and_taken() {
        let (api, name) = revision_left_behind(None);
        let pod_watch = FedWatch::<Pod>::listed([]).await;
        let revision_watch = FedWatch::<ControllerRevision>::listed([]).await;
        let context = context(&api, Some(&pod_watch.watch), Some(&revision_watch.watch));

        round_in(&api, &context).await;

        assert_eq!(
            revision_requests(&api.seen()),
            [
                format!("POST {REVISIONS}"),
                format!("GET {REVISIONS}/{name}")
            ]
        );
        all_pods_on(&api, &name).await;
    }

    const JOBS: &str = "/apis/apps.kruise.io/v1alpha1/namespaces/default/imagepulljobs";

    /// A settled CloneSet of four ready pods that asks for pre-download.
    async fn four_ready_pods_with_predownload() -> FakeApi {
        let api = FakeApi::default();
        let mut asked = cloneset(4, "nginx:1", "InPlaceIfPossible");
        asked["metadata"]["annotations"] =
            json!({"apps.kruise.io/image-predownload-parallelism": "2"});
        api.insert("clonesets", asked);
        round(&api).await;
        make_ready(&api).await;
        round(&api).await;
        api
    }

    /// Method and path of each request to the jobs or the revision `name`.
    fn predownload_requests(seen: &[Seen], name: &str) -> Vec<String> {
        seen.iter()
            .filter(|s| s.path.starts_with(JOBS) || s.path == format!("{REVISIONS}/{name}"))
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }

    /// A round that sends nothing about pre-download.
    async fn quiet_round(api: &FakeApi, update: &str) {
        let before = api.seen().len();
        round(api).await;
        assert_eq!(
            predownload_requests(&api.seen()[before..], update),
            Vec::<String>::new()
        );
    }

    fn update_revision(api: &FakeApi) -> String {
        let status = &api.get(CLONESET).unwrap()["status"];
        status["updateRevision"].as_str().unwrap().to_owned()
    }

    /// A rollout's pre-download job is made once: the update revision is
    /// marked with OpenKruise's label, and later rounds create nothing.
    #[tokio::test]
    async fn a_rollouts_predownload_jobs_are_made_once() {
        let api = four_ready_pods_with_predownload().await;
        new_main_image(&api).await;

        let before = api.seen().len();
        round(&api).await;
        let update = update_revision(&api);
        assert_eq!(
            predownload_requests(&api.seen()[before..], &update),
            [
                format!("POST {JOBS}"),
                format!("PATCH {REVISIONS}/{update}")
            ]
        );
        let revision = api.get(&format!("{REVISIONS}/{update}")).unwrap();
        assert_eq!(
            revision["metadata"]["labels"]["apps.kruise.io/pre-predownload-created"],
            "true"
        );
        assert!(api.get(&format!("{JOBS}/{update}-main")).is_some());

        quiet_round(&api, &update).await;
    }

    /// Once the rollout that made jobs is over, they are listed and
    /// deleted once, and the mark is taken off: later rounds list nothing.
    #[tokio::test]
    async fn a_finished_rollouts_jobs_are_deleted_once() {
        let api = four_ready_pods_with_predownload().await;
        let update = update_revision(&api);
        let revisions = Api::<ControllerRevision>::namespaced(api.client(), "default");
        let mark =
            json!({"metadata": {"labels": {"apps.kruise.io/pre-predownload-created": "true"}}});
        revisions
            .patch(&update, &PatchParams::default(), &Patch::Merge(mark))
            .await
            .unwrap();
        let owner = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                           "name": "demo", "uid": "cs-uid", "controller": true});
        api.insert(
            "imagepulljobs",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
                   "metadata": {"name": "demo-old-main", "namespace": "default",
                                "ownerReferences": [owner]},
                   "spec": {"image": "nginx:1", "completionPolicy": {}}}),
        );

        let before = api.seen().len();
        round(&api).await;
        assert_eq!(
            predownload_requests(&api.seen()[before..], &update),
            [
                format!("GET {JOBS}"),
                format!("DELETE {JOBS}/demo-old-main"),
                format!("PATCH {REVISIONS}/{update}")
            ]
        );
        let revision = api.get(&format!("{REVISIONS}/{update}")).unwrap();
        assert!(
            revision["metadata"]["labels"]
                .get("apps.kruise.io/pre-predownload-created")
                .is_none()
        );

        quiet_round(&api, &update).await;
    }

    /// Claims come from the claim watch once it shows the round's own
    /// claim writes: no LIST of the namespace's claims per round, and a
    /// round on a store without the claims it created waits instead of
    /// planning ids and claims again.
    #[tokio::test]
    async fn rounds_read_claims_from_the_watch_once_it_has_their_writes() {
        const CLAIMS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";
        let api = FakeApi::default();
        let mut demo = cloneset(2, "nginx:1", "ReCreate");
        demo["spec"]["volumeClaimTemplates"] = json!([{"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}]);
        api.insert("clonesets", demo);
        let pod_watch = FedWatch::<Pod>::listed([]).await;
        let revision_watch = FedWatch::<ControllerRevision>::listed([]).await;
        let claim_watch = FedWatch::<PersistentVolumeClaim>::listed([]).await;
        let context = Arc::new(CloneSetContext {
            shared: Context::new(api.client(), CONTROLLER_NAME),
            pods: WatchReads::from_watch(pod_watch.watch.clone()),
            revisions: WatchReads::from_watch(revision_watch.watch.clone()),
            claims: WatchReads::from_watch(claim_watch.watch.clone()),
        });
        let claim_requests = |seen: &[Seen]| -> Vec<String> {
            seen.iter()
                .filter(|s| s.path.starts_with(CLAIMS))
                .map(|s| s.method.clone())
                .collect()
        };

        round_in(&api, &context).await;
        assert_eq!(
            claim_requests(&api.seen()),
            ["POST", "POST"],
            "two claims created, none listed"
        );
        pod_watch.apply(listed(&api).await).await;
        revision_watch.apply(listed(&api).await).await;
        waits_without_a_request(&api, &context, "the claim store lacks both claims").await;

        claim_watch.apply(listed(&api).await).await;
        assert_ne!(round_in(&api, &context).await, Action::requeue(STORE_WAIT));
        assert_eq!(
            claim_requests(&api.seen()),
            ["POST", "POST", "GET"],
            "nothing more than the test's own LIST"
        );
    }
}
