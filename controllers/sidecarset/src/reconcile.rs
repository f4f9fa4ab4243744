//! One reconcile round: read the cluster, plan with the core, execute.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::{SidecarSet, Stored};
use kruise_controller_runtime::api_error::is_conflict;
use kruise_core::sidecarset::prepare_stored;
use kruise_core::sidecarset::update::{
    Stage, UpdateInput, UpdatePlan, compute_status, matching_pods, plan_update,
};
use kube::api::ListParams;
use kube::core::{Selector, SelectorExt};
use kube::runtime::controller::Action;
use kube::{Api, Resource};

use crate::defaults::Persisted;
use crate::execute;
use crate::{Context, Error, RESYNC_SECONDS, seconds};

pub(crate) async fn reconcile(
    stored: Arc<Stored<SidecarSet>>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    let name = stored.name().to_owned();
    if stored.metadata.deletion_timestamp.is_some() {
        context.expectations.forget(&name);
        context.pacing.forget(&name);
        return Ok(Action::await_change());
    }
    let set = match &stored.object {
        Ok(set) => set,
        Err(reason) => {
            // Nothing can be planned until someone fixes it; say why, once
            // per change of the object.
            tracing::warn!(sidecar_set = %name, %reason, "cannot read the SidecarSet; skipped");
            let note = format!(
                "cannot read this SidecarSet, so it injects and upgrades nothing: {reason}"
            );
            let reference = stored.object_ref(&());
            context
                .events
                .warning(&reference, "InvalidSpec", execute::UPDATE, &note)
                .await;
            return Ok(Action::await_change());
        }
    };
    let action = reconcile_once(set, &context).await?;
    context.backoff.reset(&name);
    Ok(action)
}

/// Reads the pods (and, for a `namespaceSelector`, the namespaces), syncs
/// the revisions, plans the round and executes it.
pub(crate) async fn reconcile_once(
    stored: &SidecarSet,
    context: &Context,
) -> Result<Action, Error> {
    let client = &context.client;
    match context.defaulted.persist(client, stored).await {
        Ok(Persisted::Written) => return Ok(Action::await_change()),
        Ok(Persisted::Unchanged) => {}
        Err(error) if is_conflict(&error) => {
            return Ok(Action::requeue(seconds(1)));
        }
        Err(error) => return Err(error.into()),
    }
    // Defaulted and hashed as the injection webhook sees it.
    let sidecar_set = prepare_stored(stored.clone());
    let name = sidecar_set.metadata.name.clone().unwrap_or_default();
    let Some(pods) = read_pods(context, &sidecar_set, &name).await? else {
        return Ok(Action::requeue(seconds(1)));
    };
    let pods: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
    let namespace_labels = namespace_labels(context, &sidecar_set).await?;
    let matched = matching_pods(&sidecar_set, &pods, &namespace_labels)?;
    let Some((latest_revision, collision_count)) =
        execute::sync_revisions(context, &sidecar_set, &matched).await?
    else {
        return Ok(Action::requeue(seconds(1)));
    };

    let expectations = context.expectations.current(&name);
    let input = UpdateInput {
        sidecar_set: &sidecar_set,
        pods: &pods,
        namespace_labels: &namespace_labels,
        latest_revision: &latest_revision,
        collision_count: Some(collision_count),
        expectations: &expectations,
        now: Timestamp::now(),
    };
    let plan = match plan_update(&input) {
        Ok(plan) => plan,
        Err(error) => {
            // An invalid strategy: the status can still be told.
            let status = compute_status(
                &sidecar_set,
                &matched,
                &latest_revision,
                Some(collision_count),
            );
            if sidecar_set.status.as_ref() != Some(&status) {
                execute::write_status(client, &sidecar_set, &status).await?;
            }
            return Err(error.into());
        }
    };
    tracing::debug!(
        sidecar_set = %name,
        stage = ?plan.stage,
        matched = plan.status.matched_pods,
        updated = plan.status.updated_pods,
        ready = plan.status.ready_pods,
        writes = plan.pod_changes.len(),
        not_upgradable = plan.not_upgradable.len(),
        "planned"
    );
    let outcome = execute::execute(context, &sidecar_set, &pods, &plan).await?;
    context.expectations.record(&name, &plan, &outcome.written);
    if let Some(first) = outcome.failures.into_iter().next() {
        return Err(Error::PodWrites {
            sidecar_set: name,
            failed: outcome.failed,
            first,
        });
    }
    Ok(next_action(&plan, outcome.conflicts))
}

/// A conflict re-plans in a second; otherwise the planner's requeue, and an
/// unfinished rollout is looked at again every [`RESYNC_SECONDS`].
fn next_action(plan: &UpdatePlan, conflicts: usize) -> Action {
    if conflicts > 0 {
        return Action::requeue(seconds(1));
    }
    if let Some(after) = plan.requeue_after_seconds {
        return Action::requeue(seconds(u64::from(after)));
    }
    match plan.stage {
        Stage::Upgrade | Stage::ResetHotUpgrade | Stage::WaitForCache => {
            Action::requeue(seconds(RESYNC_SECONDS))
        }
        Stage::Finished | Stage::NotUpdate | Stage::Paused => Action::await_change(),
    }
}

/// The pods the SidecarSet could match: its namespace (or all), narrowed by
/// its selector when it converts (the planner matches exactly either way).
/// From the shared pod watch (the store's own copies: a round touches
/// every pod, and copying them all was most of the manager's CPU at 2,000
/// pods), or listed when it cannot be trusted; None while the watch lacks
/// this SidecarSet's last pod writes.
async fn read_pods(
    context: &Context,
    sidecar_set: &SidecarSet,
    name: &str,
) -> Result<Option<Vec<Arc<Pod>>>, kube::Error> {
    let namespace = sidecar_set
        .spec
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty());
    let selector = sidecar_set
        .spec
        .selector
        .clone()
        .and_then(|s| Selector::try_from(s).ok());
    let api: Api<Pod> = match namespace {
        Some(namespace) => Api::namespaced(context.client.clone(), namespace),
        None => Api::all(context.client.clone()),
    };
    let mut params = ListParams::default();
    if let Some(selector) = &selector {
        params = params.labels_from(selector);
    }
    let none = BTreeMap::new();
    let keep = |pod: &Pod| {
        let labels = pod.metadata.labels.as_ref().unwrap_or(&none);
        namespace.is_none_or(|ns| pod.metadata.namespace.as_deref() == Some(ns))
            && selector.as_ref().is_none_or(|s| s.matches(labels))
    };
    context.pods.read_or_list(name, &api, &params, keep).await
}

/// Every namespace's labels, for a SidecarSet with a `namespaceSelector`:
/// from the namespace watch once it has listed (OpenKruise reads its
/// informer's cache too), listed until then.
async fn namespace_labels(
    context: &Context,
    sidecar_set: &SidecarSet,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, kube::Error> {
    if sidecar_set.spec.namespace_selector.is_none() {
        return Ok(BTreeMap::new());
    }
    let api: Api<Namespace> = Api::all(context.client.clone());
    let owner = sidecar_set.metadata.name.as_deref().unwrap_or_default();
    let read = context
        .namespaces
        .read_or_list(owner, &api, &ListParams::default(), |_| true)
        .await?;
    // Never None: nothing is awaited where nothing was written.
    Ok(read
        .unwrap_or_default()
        .iter()
        .map(|ns| {
            (
                ns.metadata.name.clone().unwrap_or_default(),
                ns.metadata.labels.clone().unwrap_or_default(),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use kruise_api::sidecarset::SidecarSetStatus;
    use std::time::Duration;

    fn plan(stage: Stage, requeue: Option<u32>) -> UpdatePlan {
        UpdatePlan {
            status: SidecarSetStatus::default(),
            status_changed: false,
            stage,
            pod_changes: Vec::new(),
            not_upgradable: Vec::new(),
            condition_changes: Vec::new(),
            events: Vec::new(),
            expectations: Vec::new(),
            requeue_after_seconds: requeue,
        }
    }

    #[test]
    fn requeues_follow_the_plan() {
        let none = 0;
        assert_eq!(
            next_action(&plan(Stage::WaitForCache, Some(1)), none),
            Action::requeue(Duration::from_secs(1))
        );
        assert_eq!(
            next_action(&plan(Stage::Finished, None), none),
            Action::await_change()
        );
        assert_eq!(
            next_action(&plan(Stage::Paused, None), none),
            Action::await_change()
        );
        assert_eq!(
            next_action(&plan(Stage::Upgrade, None), none),
            Action::requeue(Duration::from_secs(RESYNC_SECONDS))
        );
        assert_eq!(
            next_action(&plan(Stage::Finished, None), 2),
            Action::requeue(Duration::from_secs(1))
        );
    }
}

/// Rounds against the in-memory API server: what a round writes, exactly.
#[cfg(test)]
mod fake_api_tests {
    #![allow(clippy::unwrap_used)]

    use k8s_openapi::api::apps::v1::ControllerRevision;
    use k8s_openapi::api::core::v1::Pod;
    use kruise_api::KruiseObject as _;
    use kruise_controller_runtime::expectations::WatchReads;
    use kruise_controller_runtime::testing::{FakeApi, FedWatch, container_images};
    use kruise_core::sidecarset::{InjectionContext, inject, prepare_stored};
    use serde_json::{Value, json};

    use super::*;
    use crate::REVISION_NAMESPACE;
    use crate::pacing::Pacing;
    use kruise_core::sidecarset::update::REVISION_OWNER_LABEL;
    use std::time::Duration;

    const SET: &str = "/apis/apps.kruise.io/v1alpha1/sidecarsets/scs-demo";
    const SET_NAME: &str = "scs-demo";
    const POD: &str = "/api/v1/namespaces/default/pods/web";
    const REVISIONS: &str = "/apis/apps/v1/namespaces/kruise-system/controllerrevisions";

    /// The seed SidecarSet (sidecarset-scs-demo.yaml) with `image`, as
    /// stored: defaulted, with a uid and a generation.
    fn sidecar_set(image: &str, generation: i64) -> SidecarSet {
        let mut set: SidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "scs-demo", "uid": "set-uid", "generation": generation},
            "spec": {
                "selector": {"matchLabels": {"app": "nginx"}},
                "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": 1},
                "containers": [{"name": "sidecar1", "image": image, "command": ["sleep", "999d"],
                                "volumeMounts": [{"name": "log-volume", "mountPath": "/var/log"}]}],
                "volumes": [{"name": "log-volume", "emptyDir": {}}],
            },
        }))
        .unwrap();
        set.set_defaults();
        set
    }

    /// Pod `web` as the webhook injected it with `set`, running and ready.
    fn injected_pod(set: &SidecarSet) -> Value {
        let sidecar_image = set.spec.containers[0].container.image.as_deref().unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "pod-uid",
                         "labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1"}]},
        }))
        .unwrap();
        let sets = [prepare_stored(set.clone())];
        let context = InjectionContext {
            sidecar_sets: &sets,
            namespace_labels: None,
            request_namespace: Some("default"),
            now: "2026-01-01T00:00:00Z",
            revisions: &[],
            random_draw: None,
        };
        let mut pod = serde_json::to_value(inject(&pod, &context).unwrap().pod).unwrap();
        let ready = |name: &str, image: &str| {
            json!({"name": name, "image": image, "imageID": format!("{image}@sha256:1"),
                   "ready": true, "restartCount": 0,
                   "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}})
        };
        pod["status"] = json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [ready("sidecar1", sidecar_image), ready("nginx", "nginx:1")],
        });
        pod
    }

    /// Namespace `default`, pod `web` as injected by `injected_by`, and
    /// `sidecar_set` stored.
    fn cluster(injected_by: &SidecarSet, sidecar_set: &SidecarSet) -> FakeApi {
        let api = FakeApi::default();
        api.insert(
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}),
        );
        api.insert("pods", injected_pod(injected_by));
        api.insert("sidecarsets", serde_json::to_value(sidecar_set).unwrap());
        api
    }

    /// A context whose pods (and, unless given, revisions) are listed.
    fn listing_context(
        api: &FakeApi,
        revisions: Option<WatchReads<ControllerRevision>>,
    ) -> Arc<Context> {
        Arc::new(Context::new(
            api.client(),
            WatchReads::api_only(),
            revisions.unwrap_or_else(WatchReads::api_only),
            WatchReads::api_only(),
        ))
    }

    async fn round(api: &FakeApi, context: &Arc<Context>) -> Action {
        let stored: Stored<SidecarSet> = serde_json::from_value(api.get(SET).unwrap()).unwrap();
        reconcile(Arc::new(stored), context.clone()).await.unwrap()
    }

    #[tokio::test]
    async fn a_pod_whose_sidecar_is_current_is_not_written() {
        let set = sidecar_set("busybox", 1);
        let api = cluster(&set, &set);
        let context = listing_context(&api, None);

        round(&api, &context).await;
        let after_first = api.writes().len();
        round(&api, &context).await;

        let pod_writes: Vec<_> = api
            .writes()
            .into_iter()
            .filter(|w| w.path.starts_with(POD))
            .collect();
        assert_eq!(pod_writes, Vec::new(), "the pod is current");
        assert_eq!(
            api.writes().len(),
            after_first,
            "a settled round writes nothing"
        );
    }

    /// Both images are tagged: an untagged one is defaulted to pull
    /// `Always`, a tagged one `IfNotPresent`, and a changed pull policy
    /// is not an image-only change (the pod would rightly be refused as
    /// `UpdateImmutableField`).
    #[tokio::test]
    async fn a_new_sidecar_image_is_patched_into_the_running_pod() {
        let api = cluster(
            &sidecar_set("busybox:1.34.0", 1),
            &sidecar_set("busybox:1.35.0", 2),
        );
        let context = listing_context(&api, None);

        round(&api, &context).await;

        let images = container_images(&api.get(POD).unwrap());
        assert_eq!(images, ["sidecar1=busybox:1.35.0", "nginx=nginx:1"]);
        let spec_writes = api.writes().into_iter().filter(|w| w.path == POD).count();
        assert_eq!(spec_writes, 1, "one patch upgrades the pod");
    }

    /// A `namespaceSelector` matches the namespaces' labels as the
    /// namespace watch has them, without a LIST of the namespaces: the pod
    /// is upgraded when the watch shows its namespace selected, left when
    /// it does not.
    #[tokio::test]
    async fn a_namespace_selector_reads_the_namespace_watch() {
        for (labels, upgraded) in [(json!({"team": "a"}), true), (json!({}), false)] {
            let mut set = sidecar_set("busybox:1.35.0", 2);
            set.spec.namespace_selector =
                Some(serde_json::from_value(json!({"matchLabels": {"team": "a"}})).unwrap());
            let api = cluster(&sidecar_set("busybox:1.34.0", 1), &set);
            let namespace: Namespace = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "default", "labels": labels},
            }))
            .unwrap();
            let namespaces = FedWatch::listed([namespace]).await;
            let context = Arc::new(Context::new(
                api.client(),
                WatchReads::api_only(),
                WatchReads::api_only(),
                WatchReads::from_watch(namespaces.watch.clone()),
            ));

            round(&api, &context).await;

            let listed: Vec<_> = api
                .seen()
                .into_iter()
                .filter(|s| s.path == "/api/v1/namespaces")
                .collect();
            assert_eq!(listed, Vec::new(), "no LIST of the namespaces");
            let expected = if upgraded {
                "sidecar1=busybox:1.35.0"
            } else {
                "sidecar1=busybox:1.34.0"
            };
            let images = container_images(&api.get(POD).unwrap());
            assert_eq!(images[0], expected, "namespace labels {labels}");
        }
    }

    #[tokio::test]
    async fn a_round_within_the_interval_of_the_last_is_put_off_without_a_request() {
        let set = sidecar_set("busybox", 1);
        let api = cluster(&set, &set);
        // An hour apart: the second call is within it however slow the
        // machine is.
        let mut context = Context::new(
            api.client(),
            WatchReads::api_only(),
            WatchReads::api_only(),
            WatchReads::api_only(),
        );
        context.pacing = Pacing::with_interval(Duration::from_hours(1));
        let context = Arc::new(context);
        let stored: Arc<Stored<SidecarSet>> =
            Arc::new(serde_json::from_value(api.get(SET).unwrap()).unwrap());
        let paced = crate::paced_reconcile();

        let settled = paced(stored.clone(), context.clone()).await.unwrap();
        assert_eq!(settled, Action::await_change(), "the first round runs");
        let requests = api.seen().len();
        let put_off = paced(stored.clone(), context.clone()).await.unwrap();
        assert_ne!(put_off, Action::await_change(), "asked to run later");
        assert_eq!(api.seen().len(), requests, "and read nothing");

        context.pacing.forget(SET_NAME);
        paced(stored, context.clone()).await.unwrap();
        assert!(api.seen().len() > requests, "a forgotten set runs at once");
    }

    fn revision_requests(api: &FakeApi) -> Vec<String> {
        api.seen()
            .into_iter()
            .filter(|s| s.path.starts_with(REVISIONS))
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }

    /// Revisions come from the watch once it shows the round's own
    /// revision writes: no LIST per round, and a round on a store without
    /// the new revision, or still with the one it deleted, waits instead
    /// of writing them again.
    #[tokio::test]
    async fn rounds_read_revisions_from_the_watch_once_it_has_their_writes() {
        let mut set = sidecar_set("busybox", 1);
        set.spec.revision_history_limit = Some(1);
        let api = cluster(&set, &set);
        // An earlier spec's revision, used by no pod: the limit drops it.
        let old = api.insert(
            "controllerrevisions",
            json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                   "metadata": {"name": "scs-demo-old", "namespace": REVISION_NAMESPACE,
                                "uid": "old-uid", "labels": {REVISION_OWNER_LABEL: "scs-demo"}},
                   "revision": 1, "data": {"spec": {"containers": []}}}),
        );
        let old: ControllerRevision = serde_json::from_value(old).unwrap();
        let revision_watch = FedWatch::listed([old.clone()]).await;
        let context = listing_context(
            &api,
            Some(WatchReads::from_watch(revision_watch.watch.clone())),
        );

        round(&api, &context).await;
        let written = [
            format!("POST {REVISIONS}"),
            format!("DELETE {REVISIONS}/scs-demo-old"),
        ];
        assert_eq!(
            revision_requests(&api),
            written,
            "planned from the store, without a LIST"
        );
        assert_eq!(round(&api, &context).await, Action::requeue(seconds(1)));
        assert_eq!(
            revision_requests(&api),
            written,
            "the store lacks both writes: no request, nothing written twice"
        );
        // The new revision arrives first: the deleted one is still there.
        let listed = Api::<ControllerRevision>::namespaced(api.client(), REVISION_NAMESPACE)
            .list(&ListParams::default())
            .await
            .unwrap();
        revision_watch.apply(listed.items).await;
        assert_eq!(round(&api, &context).await, Action::requeue(seconds(1)));
        assert_eq!(revision_requests(&api).len(), written.len() + 1);

        revision_watch.delete(old).await;
        assert_ne!(round(&api, &context).await, Action::requeue(seconds(1)));
        let mut expected = written.to_vec();
        expected.push(format!("GET {REVISIONS}"));
        assert_eq!(
            revision_requests(&api),
            expected,
            "nothing more than the test's own LIST"
        );
    }
}
