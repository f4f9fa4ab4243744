//! One round for one request: read it and its pod, plan, write, again.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::containerrecreaterequest::{
    ACTIVE_LABEL, SYNC_CONTAINER_STATUSES_ANNOTATION, UNREADY_ACQUIRED_KEY,
};
use kruise_api::{ContainerRecreateRequest, Stored};
use kruise_controller_runtime::api_error::{is_conflict, is_not_found};
use kruise_core::crr::controller::{Step, plan};
use kruise_core::pod_readiness;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::Instrument;

use crate::{CONTROLLER_NAME, Context, RESYNC, request_key};

/// Writes in one round at most; the rest waits for the next round.
const STEPS_PER_ROUND: usize = 8;

/// A read or write the round could not do; retried with backoff.
pub use kruise_controller_runtime::api_error::ApiFailure as Error;
use kruise_controller_runtime::api_error::failed;

pub(crate) async fn reconcile(
    cached: Arc<Stored<ContainerRecreateRequest>>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    let key = request_key(&cached);
    let span = tracing::info_span!("reconcile", controller = CONTROLLER_NAME, request = %key);
    let action = round(&cached, &context).instrument(span).await?;
    context.backoff.reset(&key);
    Ok(action)
}

async fn round(
    cached: &Stored<ContainerRecreateRequest>,
    context: &Context,
) -> Result<Action, Error> {
    let namespace = cached.namespace().unwrap_or_default();
    let requests: Api<Stored<ContainerRecreateRequest>> =
        Api::namespaced(context.client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    for _ in 0..STEPS_PER_ROUND {
        // Fresh reads: the node agent writes the same object.
        let Some(stored) = requests
            .get_opt(cached.name())
            .await
            .map_err(failed("read the request"))?
        else {
            return Ok(Action::await_change());
        };
        let request = match &stored.object {
            Ok(request) => request,
            Err(reason) => {
                report_unreadable(context, &stored, reason).await;
                return Ok(Action::await_change());
            }
        };
        let pod = pods
            .get_opt(&request.spec.pod_name)
            .await
            .map_err(failed("read the pod"))?;
        let step = plan(request, pod.as_ref(), Timestamp::now());
        if let Step::Wait(after) = step {
            return Ok(wait(request, after));
        }
        let written = write(context, &requests, &pods, request, pod.as_ref(), step).await;
        match written {
            Ok(()) => {}
            Err(error) if is_conflict(&error.source) || is_not_found(&error.source) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(Action::requeue(Duration::from_secs(1)))
}

/// An open request is looked at again at least every [`RESYNC`]; a
/// finished one only when its TTL is due (or on a change).
fn wait(request: &ContainerRecreateRequest, after: Option<Duration>) -> Action {
    let finished = request
        .status
        .as_ref()
        .is_some_and(|s| s.completion_time.is_some());
    let soonest = Duration::from_millis(100);
    match after {
        // Nothing changes a finished request but its TTL (and a change
        // wakes it anyway): no reason to read it again before then.
        Some(after) if finished => Action::requeue(after.max(soonest)),
        Some(after) => Action::requeue(after.min(RESYNC).max(soonest)),
        None if finished || request.metadata.deletion_timestamp.is_some() => Action::await_change(),
        None => Action::requeue(RESYNC),
    }
}

async fn write(
    context: &Context,
    requests: &Api<Stored<ContainerRecreateRequest>>,
    pods: &Api<Pod>,
    request: &ContainerRecreateRequest,
    pod: Option<&Pod>,
    step: Step,
) -> Result<(), Error> {
    let name = request.metadata.name.as_deref().unwrap_or_default();
    let version = request.metadata.resource_version.clone();
    let params = PatchParams::default();
    match step {
        Step::Complete { message } => {
            let patch = json!({
                "metadata": {"resourceVersion": version},
                "status": {"phase": "Completed", "completionTime": Timestamp::now().to_string(),
                           "message": message},
            });
            requests
                .patch_status(name, &params, &Patch::Merge(patch))
                .await
                .map_err(failed("complete the request"))?;
            context
                .events
                .normal(&request.object_ref(&()), "Completed", "Complete", &message)
                .await;
        }
        Step::WritePodCondition(condition) => {
            let Some(pod) = pod else { return Ok(()) };
            // A hold turns Ready False in the same write (spec 04 §3).
            let patch = pod_readiness::status_patch(pod, &condition, Timestamp::now());
            pods.patch_status(&pod.name_any(), &params, &Patch::Strategic(patch))
                .await
                .map_err(failed("write the pod's KruisePodReady condition"))?;
        }
        Step::AddFinalizer | Step::RemoveFinalizer => {
            let mut finalizers = request.metadata.finalizers.clone().unwrap_or_default();
            finalizers.retain(|f| f != UNREADY_ACQUIRED_KEY);
            if step == Step::AddFinalizer {
                finalizers.push(UNREADY_ACQUIRED_KEY.to_owned());
            }
            let patch = json!({"metadata": {"resourceVersion": version, "finalizers": finalizers}});
            requests
                .patch(name, &params, &Patch::Merge(patch))
                .await
                .map_err(failed("write the request's finalizers"))?;
        }
        Step::RemoveActiveLabel => {
            let patch = json!({"metadata": {"labels": {ACTIVE_LABEL: Value::Null}}});
            requests
                .patch(name, &params, &Patch::Merge(patch))
                .await
                .map_err(failed("remove the active label"))?;
        }
        Step::WriteSnapshot(snapshot) => {
            let text = serde_json::to_string(&snapshot).unwrap_or_default();
            annotate(requests, request, SYNC_CONTAINER_STATUSES_ANNOTATION, &text)
                .await
                .map_err(failed("write the container snapshot"))?;
        }
        Step::StartGrace(since) => {
            annotate(requests, request, UNREADY_ACQUIRED_KEY, &since.to_string())
                .await
                .map_err(failed("start the not-ready grace"))?;
        }
        Step::Delete => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: request.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            requests
                .delete(name, &params)
                .await
                .map_err(failed("delete the finished request"))?;
        }
        Step::Wait(_) => {}
    }
    Ok(())
}

/// Sets one annotation, on the version the step was planned on.
async fn annotate(
    requests: &Api<Stored<ContainerRecreateRequest>>,
    request: &ContainerRecreateRequest,
    key: &str,
    value: &str,
) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {
        "resourceVersion": request.metadata.resource_version,
        "annotations": {key: value},
    }});
    let name = request.metadata.name.as_deref().unwrap_or_default();
    requests
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(drop)
}

async fn report_unreadable(
    context: &Context,
    stored: &Stored<ContainerRecreateRequest>,
    reason: &str,
) {
    tracing::warn!(request = stored.name(), %reason, "cannot read the request: skipped");
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("apps.kruise.io/v1alpha1".to_owned()),
        kind: Some("ContainerRecreateRequest".to_owned()),
        name: stored.metadata.name.clone(),
        namespace: stored.metadata.namespace.clone(),
        uid: stored.metadata.uid.clone(),
        ..Default::default()
    };
    context
        .events
        .warning(&reference, "InvalidSpec", "Skip", reason)
        .await;
}

/// Rounds of the real reconcile against the in-memory API server: a
/// request whose pod was replaced is completed (status, event, `active`
/// label), a finished one is deleted by UID once its TTL has passed and
/// kept before, a recreating one gets the snapshot of its pod's new
/// containers, and an API failure is the round's error. (The pod's
/// `KruisePodReady` hold and its release are checked end to end, in
/// controllers/manager/tests/container_recreate.rs.)
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kruise_api::containerrecreaterequest::POD_UID_LABEL;
    use kruise_controller_runtime::testing::{FakeApi, condition};
    use kruise_core::crr::controller::{POD_GONE, SNAPSHOT_EVERY};

    use super::*;

    const REQUESTS: &str =
        "/apis/apps.kruise.io/v1alpha1/namespaces/default/containerrecreaterequests";

    fn context(api: &FakeApi) -> Arc<Context> {
        Arc::new(Context::new(api.client(), CONTROLLER_NAME))
    }

    /// `seconds` ago, in whole seconds as the API server keeps times.
    fn ago(seconds: i64) -> String {
        Timestamp::from_second(Timestamp::now().as_second() - seconds)
            .unwrap()
            .to_string()
    }

    /// A request for pod `web` (uid `pod-uid`) and its container `app`,
    /// with `extra` merged over it.
    fn request(name: &str, extra: &Value) -> Value {
        let mut request = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"),
                         "creationTimestamp": ago(10),
                         "labels": {POD_UID_LABEL: "pod-uid", ACTIVE_LABEL: "true"}},
            "spec": {"podName": "web", "containers": [{"name": "app"}]},
        });
        json_patch::merge(&mut request, extra);
        request
    }

    fn pod(uid: &str, status: &Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]},
            "status": status,
        })
    }

    async fn round_on(api: &FakeApi, name: &str) -> Result<Action, Error> {
        let stored = api.get(&format!("{REQUESTS}/{name}")).unwrap();
        let cached: Stored<ContainerRecreateRequest> = serde_json::from_value(stored).unwrap();
        reconcile(Arc::new(cached), context(api)).await
    }

    #[tokio::test]
    async fn a_request_whose_pod_was_replaced_is_completed_as_pod_gone_and_loses_its_active_label()
    {
        let api = FakeApi::default();
        api.insert("pods", pod("a-later-pod", &json!({})));
        api.insert("containerrecreaterequests", request("restart", &json!({})));

        let action = round_on(&api, "restart").await.unwrap();

        assert_eq!(action, Action::await_change(), "finished, no TTL");
        let stored = api.get(&format!("{REQUESTS}/restart")).unwrap();
        assert_eq!(stored["status"]["phase"], "Completed");
        assert_eq!(stored["status"]["message"], POD_GONE);
        assert!(stored["status"]["completionTime"].is_string());
        assert_eq!(
            stored["metadata"]["labels"],
            json!({POD_UID_LABEL: "pod-uid"})
        );
        let writes: Vec<(String, String)> = api
            .writes()
            .into_iter()
            .map(|w| (w.method, w.path))
            .collect();
        assert_eq!(
            writes,
            [
                ("PATCH".to_owned(), format!("{REQUESTS}/restart/status")),
                (
                    "POST".to_owned(),
                    "/apis/events.k8s.io/v1/namespaces/default/events".to_owned()
                ),
                ("PATCH".to_owned(), format!("{REQUESTS}/restart")),
            ]
        );
        let event = &api.writes()[1].body;
        assert_eq!(
            (&event["reason"], &event["note"]),
            (&json!("Completed"), &json!(POD_GONE))
        );
        // The completion names the version it was planned on.
        assert_eq!(api.writes()[0].body["metadata"]["resourceVersion"], "2");
    }

    #[test]
    fn a_finished_request_waits_for_its_ttl_and_an_open_one_at_most_resync() {
        let parse = |extra: &Value| -> ContainerRecreateRequest {
            serde_json::from_value(request("r", extra)).unwrap()
        };
        let open = parse(&json!({}));
        let finished = parse(&json!({"status": {"phase": "Completed", "completionTime": ago(10)}}));
        let long = Duration::from_secs(50);

        assert_eq!(wait(&finished, Some(long)), Action::requeue(long));
        assert_eq!(wait(&open, Some(long)), Action::requeue(RESYNC));
        assert_eq!(
            wait(&finished, Some(Duration::ZERO)),
            Action::requeue(Duration::from_millis(100))
        );
        assert_eq!(wait(&finished, None), Action::await_change());
        assert_eq!(wait(&open, None), Action::requeue(RESYNC));
    }

    #[tokio::test]
    async fn a_finished_request_is_kept_until_its_ttl_and_then_deleted_by_uid() {
        let api = FakeApi::default();
        let finished = |completed: i64| {
            json!({
                "metadata": {"labels": {ACTIVE_LABEL: null}},
                "spec": {"ttlSecondsAfterFinished": 60},
                "status": {"phase": "Completed", "completionTime": ago(completed)},
            })
        };
        api.insert("containerrecreaterequests", request("fresh", &finished(10)));
        api.insert(
            "containerrecreaterequests",
            request("stale", &finished(120)),
        );

        let fresh = round_on(&api, "fresh").await.unwrap();
        assert_ne!(fresh, Action::requeue(RESYNC), "50s left, not every RESYNC");
        assert_ne!(fresh, Action::await_change(), "the TTL still wakes it");
        assert_eq!(api.writes(), []);

        let stale = round_on(&api, "stale").await.unwrap();
        assert_eq!(stale, Action::await_change(), "gone");
        assert_eq!(api.get(&format!("{REQUESTS}/stale")), None);
        assert!(api.get(&format!("{REQUESTS}/fresh")).is_some());
        let writes = api.writes();
        assert_eq!(writes.len(), 1);
        assert_eq!(
            (writes[0].method.as_str(), writes[0].path.as_str()),
            ("DELETE", format!("{REQUESTS}/stale").as_str())
        );
        assert_eq!(writes[0].body["preconditions"]["uid"], "stale-uid");
    }

    #[tokio::test]
    async fn a_recreating_request_gets_the_snapshot_of_its_pods_new_containers() {
        let api = FakeApi::default();
        let statuses = json!({"containerStatuses": [
            {"name": "app", "ready": true, "restartCount": 1, "image": "busybox",
             "imageID": "", "containerID": "containerd://new",
             "state": {"running": {"startedAt": ago(5)}}},
            {"name": "sidecar", "ready": true, "restartCount": 0, "image": "busybox",
             "imageID": "", "containerID": "containerd://side",
             "state": {"running": {"startedAt": ago(5)}}},
        ]});
        api.insert("pods", pod("pod-uid", &statuses));
        let recreating = json!({"status": {"phase": "Recreating"}});
        api.insert("containerrecreaterequests", request("restart", &recreating));

        let action = round_on(&api, "restart").await.unwrap();

        assert_eq!(action, Action::requeue(SNAPSHOT_EVERY));
        let stored = api.get(&format!("{REQUESTS}/restart")).unwrap();
        let text = stored["metadata"]["annotations"][SYNC_CONTAINER_STATUSES_ANNOTATION]
            .as_str()
            .unwrap();
        let snapshot: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            snapshot,
            json!([{"name": "app", "ready": true, "restartCount": 1,
                    "containerID": "containerd://new"}])
        );
        assert_eq!(stored["status"], json!({"phase": "Recreating"}));
        assert_eq!(api.writes().len(), 1, "one annotation patch, then a wait");
    }

    /// A request with an unready grace holds its pod through the
    /// `KruisePodReady` condition, and turns Ready False in the same write
    /// (spec 04 §3 step 8), on the version of the pod it read.
    #[tokio::test]
    async fn a_hold_turns_the_pod_unready_in_the_same_write() {
        let api = FakeApi::default();
        let mut held = pod(
            "pod-uid",
            &json!({"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "KruisePodReady", "status": "True"}]}),
        );
        held["spec"]["readinessGates"] = json!([{"conditionType": "KruisePodReady"}]);
        api.insert("pods", held);
        let graced = json!({
            "metadata": {"finalizers": [UNREADY_ACQUIRED_KEY]},
            "spec": {"strategy": {"unreadyGracePeriodSeconds": 30}},
            "status": {"phase": "Recreating"},
        });
        api.insert("containerrecreaterequests", request("restart", &graced));
        let read = api.get("/api/v1/namespaces/default/pods/web").unwrap();

        round_on(&api, "restart").await.unwrap();

        let write = api.writes()[0].clone();
        assert_eq!(write.path, "/api/v1/namespaces/default/pods/web/status");
        assert_eq!(
            write.body["metadata"]["resourceVersion"],
            read["metadata"]["resourceVersion"]
        );
        let stored = api.get("/api/v1/namespaces/default/pods/web").unwrap();
        let held = condition(&stored, "KruisePodReady");
        assert_eq!(held["status"], "False");
        assert_eq!(
            held["message"],
            r#"[{"userAgent":"ContainerRecreateRequest","key":"default/restart"}]"#
        );
        let ready = condition(&stored, "Ready");
        assert_eq!(
            (&ready["status"], &ready["reason"]),
            (&json!("False"), &json!("ReadinessGatesNotReady"))
        );
    }

    #[tokio::test]
    async fn an_api_server_failure_is_the_rounds_error() {
        let api = FakeApi::default();
        api.insert("containerrecreaterequests", request("restart", &json!({})));
        api.set_down(true);

        let error = round_on(&api, "restart").await.unwrap_err();

        assert_eq!(error.action, "read the request");
        assert!(
            matches!(error.source, kube::Error::Api(ref status) if status.code == 500),
            "{error}"
        );
        assert_eq!(api.writes(), []);
    }
}
