//! The pod readiness controller (spec 00 §1.5). The pod webhook gives
//! every pod an OpenKruise workload creates the `KruisePodReady` readiness
//! gate; the kubelet keeps such a pod unready until the condition exists
//! and is True. This controller writes it True, once, on each pod that has
//! the gate and no condition yet. After that the condition belongs to the
//! writers that hold the pod not-ready for a while (ContainerRecreateRequests,
//! CloneSet lifecycle hooks with `markPodNotReady`), each through its entry
//! in the condition's holder list.
//!
//! The decision is [`kruise_core::pod_readiness::first_condition`], made
//! from the manager's shared pod watch: only pods it picks reach a round.
//! A CloneSet's new pod is left to the CloneSet, which writes the
//! condition with the `InPlaceUpdateReady` gate it opens once the pod is
//! scheduled (`left_to_workload`): one write per pod instead of two.
//! The write carries the resourceVersion it was decided on, so a holder
//! that wrote first is never overwritten; the watch then shows the
//! condition and nothing more is done.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kruise_controller_runtime::api_error::{ApiFailure, unless_raced};
use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_controller_runtime::{metrics, outcome, readiness};
use kruise_core::pod_readiness::{first_condition, left_to_workload, status_patch};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::{Api, Client, ResourceExt};

/// The field manager of every write.
pub const CONTROLLER_NAME: &str = "kruise-podreadiness-controller";

/// A write the round could not make; retried with backoff.
pub type Error = ApiFailure;

/// Runs the controller on the manager's shared pod watch until the task is
/// dropped. Pods that need nothing are filtered out before they are queued.
pub async fn run(client: Client, watches: SharedWatches) {
    let context = Arc::new(Context::new(client, CONTROLLER_NAME));
    tracing::info!(controller = CONTROLLER_NAME, "starting");
    let pods = watches.pods();
    let needing = pods
        .subscribe(CONTROLLER_NAME)
        .filter(|pod| std::future::ready(needs_condition(pod, Timestamp::now()).is_some()));
    let controller = Controller::for_shared_stream(needing, pods.store());
    readiness::global().track(CONTROLLER_NAME, pods.listed());
    controller
        .run(
            metrics::timed(CONTROLLER_NAME, reconcile),
            on_error,
            context,
        )
        .for_each(|result| async move { outcome::log(CONTROLLER_NAME, &result) })
        .await;
    tracing::info!(controller = CONTROLLER_NAME, "stopped");
}

/// One round: the condition written True if the pod (as the watch has it)
/// still needs it. A conflict or a pod gone is a race lost, not a failure:
/// the watch brings the pod as it is now.
async fn reconcile(pod: Arc<Pod>, context: Arc<Context>) -> Result<Action, Error> {
    let now = Timestamp::now();
    let Some(condition) = needs_condition(&pod, now) else {
        return Ok(Action::await_change());
    };
    let pods: Api<Pod> =
        Api::namespaced(context.client.clone(), &pod.namespace().unwrap_or_default());
    let written = pods
        .patch_status(
            &pod.name_any(),
            &PatchParams {
                field_manager: Some(CONTROLLER_NAME.to_owned()),
                ..PatchParams::default()
            },
            &Patch::Strategic(status_patch(&pod, &condition, now)),
        )
        .await;
    unless_raced(written, "write the pod's KruisePodReady condition")?;
    context.backoff.reset(&pod_key(&pod));
    Ok(Action::await_change())
}

/// The condition this controller writes on `pod`, if any: not on a pod
/// whose workload writes it with its own first status write.
fn needs_condition(pod: &Pod, now: Timestamp) -> Option<PodCondition> {
    first_condition(pod, now).filter(|_| !left_to_workload(pod))
}

// The signature is kube-runtime's error policy.
#[allow(clippy::needless_pass_by_value)]
fn on_error(pod: Arc<Pod>, error: &Error, context: Arc<Context>) -> Action {
    let key = pod_key(&pod);
    let delay = context.backoff.next(&key);
    tracing::warn!(pod = %key, %error, retry_in = ?delay, "pod readiness round failed");
    Action::requeue(delay)
}

fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Rounds against an in-memory API server.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kruise_controller_runtime::testing::FakeApi;
    use serde_json::{Value, json};

    use super::*;

    const POD: &str = "/api/v1/namespaces/default/pods/web";

    fn gated_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "pod-uid"},
            "spec": {"containers": [{"name": "app", "image": "nginx"}],
                     "readinessGates": [{"conditionType": "KruisePodReady"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady"}]},
        })
    }

    async fn round_on(api: &FakeApi, pod: Value) -> Action {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        let context = Arc::new(Context::new(api.client(), CONTROLLER_NAME));
        reconcile(Arc::new(pod), context).await.unwrap()
    }

    fn conditions(api: &FakeApi) -> Vec<(String, String)> {
        api.get(POD).unwrap()["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap().to_owned(),
                    c["status"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn a_gated_pod_gets_its_condition_once() {
        let api = FakeApi::default();
        api.insert("pods", gated_pod());
        let read = api.get(POD).unwrap();
        assert_eq!(round_on(&api, read.clone()).await, Action::await_change());
        assert_eq!(
            conditions(&api),
            [
                ("Ready".into(), "False".into()),
                ("KruisePodReady".into(), "True".into())
            ]
        );
        let writes = api.writes();
        assert_eq!(writes.len(), 1);
        assert_eq!(
            writes[0].body["metadata"]["resourceVersion"],
            read["metadata"]["resourceVersion"]
        );

        // The pod as the watch then has it: nothing to do, no request.
        let before = api.seen().len();
        round_on(&api, api.get(POD).unwrap()).await;
        assert_eq!(api.seen().len(), before);
    }

    /// A holder that wrote between the watch's version and the round is
    /// kept: the write conflicts and the round ends quietly.
    #[tokio::test]
    async fn a_holder_that_wrote_first_is_not_overwritten() {
        let api = FakeApi::default();
        api.insert("pods", gated_pod());
        let stale = api.get(POD).unwrap();
        let pods: Api<Pod> = Api::namespaced(api.client(), "default");
        let held = json!({"status": {"conditions": [{"type": "KruisePodReady", "status": "False",
            "message": "[{\"userAgent\":\"ContainerRecreateRequest\",\"key\":\"r\"}]"}]}});
        pods.patch_status("web", &PatchParams::default(), &Patch::Strategic(held))
            .await
            .unwrap();
        assert_eq!(round_on(&api, stale).await, Action::await_change());
        assert!(conditions(&api).contains(&("KruisePodReady".into(), "False".into())));
    }

    #[tokio::test]
    async fn a_cloneset_pod_waiting_for_its_in_place_gate_is_left_to_the_cloneset() {
        let api = FakeApi::default();
        let mut pod = gated_pod();
        pod["spec"]["readinessGates"] = json!([{"conditionType": "KruisePodReady"},
                                               {"conditionType": "InPlaceUpdateReady"}]);
        api.insert("pods", pod.clone());
        round_on(&api, pod).await;
        assert!(api.writes().is_empty());
    }

    #[tokio::test]
    async fn pods_without_the_gate_or_being_deleted_are_left_alone() {
        let api = FakeApi::default();
        let mut plain = gated_pod();
        plain["spec"]["readinessGates"] = json!([]);
        let mut deleting = gated_pod();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        for pod in [plain, deleting] {
            round_on(&api, pod).await;
        }
        assert!(api.seen().is_empty());
    }
}
