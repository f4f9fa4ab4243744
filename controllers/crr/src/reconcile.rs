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
    match after {
        Some(after) => Action::requeue(after.min(RESYNC).max(Duration::from_millis(100))),
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
            let patch = json!({
                "metadata": {"resourceVersion": pod.metadata.resource_version},
                "status": {"conditions": [condition]},
            });
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
