//! The agent's ContainerRecreateRequest loop for one node. It watches only
//! the requests of its node that are still active (labels `node-name` and
//! `active`, set by the webhook), works on one request per pod at a time
//! ([`kruise_core::crr::daemon::pick`]), and does what
//! [`kruise_core::crr::daemon::plan`] says: mark the request recreating,
//! write container states, run a preStop hook and stop a container,
//! complete the request.
//!
//! Every open request is looked at again at least every
//! [`daemon::RECHECK`], whether or not an event came: a queued request
//! never depends on an event of the one ahead of it (a request that
//! finishes leaves this watch when the manager drops its `active` label;
//! OpenKruise users see requests stuck in Pending around that moment).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::containerrecreaterequest::{
    ACTIVE_LABEL, ContainerRecreateRequestContainerRecreateState as ContainerState,
    ContainerRecreateRequestPhase as Phase, NODE_NAME_LABEL,
};
use kruise_api::{ContainerRecreateRequest, Stored};
use kruise_controller_runtime::api_error::{ApiFailure, is_conflict, raced, unless_raced};
use kruise_controller_runtime::backoff::Backoff;
use kruise_controller_runtime::events::Events;
use kruise_controller_runtime::metrics;
use kruise_core::crr::controller::is_target;
use kruise_core::crr::daemon::{self, Kill, Observed, Step};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use crate::hooks::run_pre_stop;
use crate::runtime::{ContainerRuntime, RuntimeError};

/// The field manager of every write and the reporting component of events.
pub const AGENT_NAME: &str = "kruise-node-agent";

/// Steps per round for one pod; whatever is left waits for the next round.
const STEPS_PER_ROUND: usize = 6;
/// A stop gets at least this long after its preStop hook (as kubelet).
const MIN_STOP_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action}: {source}")]
    Api {
        action: &'static str,
        source: kube::Error,
    },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

fn failed(action: &'static str) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Api { action, source }
}

struct Agent<R> {
    client: Client,
    node: String,
    runtime: R,
    events: Events,
    backoff: Backoff,
    /// One round per pod at a time: two requests of one pod never kill
    /// containers side by side.
    pod_locks: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Runs the agent for `node` until the task is dropped.
pub async fn run<R: ContainerRuntime>(client: Client, node: String, runtime: R) {
    let agent = Arc::new(Agent {
        events: Events::new(client.clone(), AGENT_NAME),
        backoff: Backoff::default(),
        pod_locks: Mutex::default(),
        node: node.clone(),
        runtime,
        client: client.clone(),
    });
    tracing::info!(agent = AGENT_NAME, %node, "starting");
    let mine = watcher::Config::default().labels(&own_requests(&node));
    Controller::new(Api::<Stored<ContainerRecreateRequest>>::all(client), mine)
        .run(metrics::timed(AGENT_NAME, reconcile), on_error, agent)
        .for_each(|_| async {})
        .await;
}

/// The label selector of this node's active requests.
fn own_requests(node: &str) -> String {
    format!("{NODE_NAME_LABEL}={node},{ACTIVE_LABEL}=true")
}

// The signature is kube-runtime's error policy.
#[allow(clippy::needless_pass_by_value)]
fn on_error<R>(
    request: Arc<Stored<ContainerRecreateRequest>>,
    error: &Error,
    agent: Arc<Agent<R>>,
) -> Action {
    let key = pod_key(&request);
    let delay = agent.backoff.next(&key);
    tracing::warn!(node = %agent.node, pod = %key, %error, retry_in = ?delay, "recreate round failed");
    Action::requeue(delay)
}

/// `<namespace>/<podName>` of a request: the agent's unit of work.
fn pod_key(request: &Stored<ContainerRecreateRequest>) -> String {
    let pod = request
        .object
        .as_ref()
        .map_or("", |r| r.spec.pod_name.as_str());
    format!("{}/{pod}", request.namespace().unwrap_or_default())
}

async fn reconcile<R: ContainerRuntime>(
    request: Arc<Stored<ContainerRecreateRequest>>,
    agent: Arc<Agent<R>>,
) -> Result<Action, Error> {
    let Ok(cached) = &request.object else {
        // The manager reports requests it cannot read.
        return Ok(Action::await_change());
    };
    let key = pod_key(&request);
    let lock = {
        let mut locks = agent
            .pod_locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.entry(key.clone()).or_default().clone()
    };
    let _turn = lock.lock().await;
    let span = tracing::info_span!("recreate", node = %agent.node, pod = %key);
    let action = round(&agent, cached).instrument(span).await?;
    agent.backoff.reset(&key);
    Ok(action)
}

/// Up to [`STEPS_PER_ROUND`] steps for the triggering request's pod, each
/// on a fresh read of the pod's requests.
async fn round<R: ContainerRuntime>(
    agent: &Agent<R>,
    trigger: &ContainerRecreateRequest,
) -> Result<Action, Error> {
    let namespace = trigger.metadata.namespace.clone().unwrap_or_default();
    let requests: Api<Stored<ContainerRecreateRequest>> =
        Api::namespaced(agent.client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(agent.client.clone(), &namespace);
    for _ in 0..STEPS_PER_ROUND {
        let listed = requests
            .list(&ListParams::default().labels(&own_requests(&agent.node)))
            .await
            .map_err(failed("list the node's requests"))?;
        let of_pod: Vec<ContainerRecreateRequest> = listed
            .items
            .into_iter()
            .filter_map(|stored| stored.object.ok())
            .filter(|r| r.spec.pod_name == trigger.spec.pod_name)
            .collect();
        let Some(pick) = daemon::pick(&of_pod) else {
            return Ok(Action::await_change());
        };
        for &queued in &pick.to_queue {
            set_phase(&requests, &of_pod[queued], "Pending").await?;
        }
        let picked = &of_pod[pick.picked];
        let Some(pod) = pods
            .get_opt(&picked.spec.pod_name)
            .await
            .map_err(failed("read the pod"))?
        else {
            // The manager completes requests whose pod has gone.
            return Ok(Action::requeue(daemon::RECHECK));
        };
        if !is_target(picked, &pod) {
            // Gone too: a pod of the same name made since is not the one
            // the request names, and its containers are not to be touched.
            return Ok(Action::requeue(daemon::RECHECK));
        }
        let runtime = agent.runtime.pod_containers(&pod).await?;
        let step = daemon::plan(&Observed {
            request: picked,
            runtime: &runtime,
            now: Timestamp::now(),
        });
        match step {
            Step::Wait(after) => return Ok(Action::requeue(after.min(daemon::RECHECK))),
            Step::StartRecreating => set_phase(&requests, picked, "Recreating").await?,
            Step::WriteStates(states) => {
                write_status(
                    &requests,
                    picked,
                    json!({"containerRecreateStates": states}),
                )
                .await?;
            }
            Step::Kill { kill, states } => {
                let noted;
                let picked = match &kill.note {
                    Some(note) => match note_stop(&requests, picked, note).await? {
                        Some(written) => {
                            noted = written;
                            &noted
                        }
                        // Written meanwhile: plan again.
                        None => continue,
                    },
                    None => picked,
                };
                let states = match stop(agent, &pod, picked, &kill).await {
                    Ok(()) => states,
                    Err(error) => daemon::kill_failed(states, kill.index, &error.to_string()),
                };
                record_kill(&requests, picked, states).await?;
            }
            Step::Complete { states, message } => {
                let status = json!({
                    "phase": "Completed",
                    "completionTime": Timestamp::now().to_string(),
                    "message": message,
                    "containerRecreateStates": states,
                });
                write_status(&requests, picked, status).await?;
            }
        }
    }
    Ok(Action::requeue(Duration::from_millis(200)))
}

/// Runs the container's preStop hook, then stops it with what is left of
/// the grace period.
async fn stop<R: ContainerRuntime>(
    agent: &Agent<R>,
    pod: &Pod,
    request: &ContainerRecreateRequest,
    kill: &Kill,
) -> Result<(), RuntimeError> {
    let grace = Duration::from_secs(kill.grace_seconds.max(0).unsigned_abs());
    let request_name = request.metadata.name.as_deref().unwrap_or_default();
    let note = format!(
        "Stopping container {} by ContainerRecreateRequest {request_name}",
        kill.name
    );
    tracing::info!(container = %kill.name, id = %kill.container_id, "{note}");
    agent
        .events
        .normal(&pod.object_ref(&()), "Killing", "Recreate", &note)
        .await;
    let started = Instant::now();
    if let Some(hook) = &kill.pre_stop {
        let ports = request
            .spec
            .containers
            .get(kill.index)
            .map_or(&[][..], |c| &c.ports[..]);
        if let Err(message) =
            run_pre_stop(&agent.runtime, pod, &kill.container_id, hook, ports, grace).await
        {
            tracing::warn!(container = %kill.name, %message, "preStop hook failed");
            agent
                .events
                .warning(
                    &pod.object_ref(&()),
                    "FailedPreStopHook",
                    "Recreate",
                    &message,
                )
                .await;
        }
    }
    let left = grace.saturating_sub(started.elapsed()).max(MIN_STOP_GRACE);
    agent.runtime.stop_container(&kill.container_id, left).await
}

/// Notes on the request, on the version planned from, the instance a
/// forced recreation is about to stop ([`daemon::STOPPING_ANNOTATION`]),
/// so that an agent crashing between the stop and its record does not stop
/// the container's next instance too. Returns the request as written; none
/// when it was written or deleted meanwhile.
async fn note_stop(
    requests: &Api<Stored<ContainerRecreateRequest>>,
    request: &ContainerRecreateRequest,
    note: &str,
) -> Result<Option<ContainerRecreateRequest>, Error> {
    let patch = json!({"metadata": {
        "resourceVersion": request.metadata.resource_version,
        "annotations": {daemon::STOPPING_ANNOTATION: note},
    }});
    let name = request.metadata.name.as_deref().unwrap_or_default();
    let written = requests
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await;
    let written = raced(written).map_err(failed("note the stop on the request"))?;
    // It read a moment ago; should it not now, the record of the stop
    // settles the version by its conflict retry.
    Ok(written.map(|stored| stored.object.unwrap_or_else(|_| request.clone())))
}

/// Writes the states after a stop. A stop cannot be planned again, so a
/// conflict (the manager's snapshot written meanwhile) is retried once on
/// the request as it now is, while it is still recreating: a lost
/// `isKilled` would have a forced recreation stop the new instance too.
async fn record_kill(
    requests: &Api<Stored<ContainerRecreateRequest>>,
    request: &ContainerRecreateRequest,
    states: Vec<ContainerState>,
) -> Result<(), Error> {
    let name = request.metadata.name.as_deref().unwrap_or_default();
    let written = json!({"containerRecreateStates": states});
    match patch_status(requests, request, written.clone()).await {
        Err(error) if is_conflict(&error) => {}
        other => return settled(other),
    }
    let fresh = requests
        .get_opt(name)
        .await
        .map_err(failed("read the request again"))?
        .and_then(|stored| stored.object.ok());
    match fresh {
        Some(fresh) if fresh.status.as_ref().map(|s| s.phase) == Some(Phase::Recreating) => {
            settled(patch_status(requests, &fresh, written).await)
        }
        _ => Ok(()),
    }
}

async fn set_phase(
    requests: &Api<Stored<ContainerRecreateRequest>>,
    request: &ContainerRecreateRequest,
    phase: &str,
) -> Result<(), Error> {
    write_status(requests, request, json!({"phase": phase})).await
}

/// A status merge patch on the version the step was planned on: a
/// conflict (the manager completed the request meanwhile) is a new plan.
async fn write_status(
    requests: &Api<Stored<ContainerRecreateRequest>>,
    request: &ContainerRecreateRequest,
    status: serde_json::Value,
) -> Result<(), Error> {
    settled(patch_status(requests, request, status).await)
}

async fn patch_status(
    requests: &Api<Stored<ContainerRecreateRequest>>,
    request: &ContainerRecreateRequest,
    status: serde_json::Value,
) -> Result<(), kube::Error> {
    let patch = json!({
        "metadata": {"resourceVersion": request.metadata.resource_version},
        "status": status,
    });
    let name = request.metadata.name.as_deref().unwrap_or_default();
    requests
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(drop)
}

/// A status write's result where a conflict or a request gone is no
/// failure: the next round plans from what is there.
fn settled(result: Result<(), kube::Error>) -> Result<(), Error> {
    unless_raced(result, "write the request's status")
        .map_err(|ApiFailure { action, source }| Error::Api { action, source })
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use kruise_api::containerrecreaterequest::POD_UID_LABEL;
    use kruise_controller_runtime::testing::FakeApi;
    use serde_json::Value;

    use super::*;
    use crate::sim::SimRuntime;

    const NODE: &str = "node-1";

    /// Pod `web` on the node, its container `app` running.
    fn pod(uid: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": uid},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "busybox"}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "app", "image": "busybox", "imageID": "", "ready": true,
                "restartCount": 0, "containerID": "sim://app-1",
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            }]},
        })
    }

    /// A forced recreation of `app` in the pod with uid `pod_uid`.
    fn request(pod_uid: &str) -> ContainerRecreateRequest {
        let request = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ContainerRecreateRequest",
            "metadata": {"name": "restart", "namespace": "default", "uid": "restart-uid",
                         "creationTimestamp": Timestamp::now().to_string(),
                         "labels": {POD_UID_LABEL: pod_uid, NODE_NAME_LABEL: NODE,
                                    ACTIVE_LABEL: "true"}},
            "spec": {"podName": "web",
                     "containers": [{"name": "app", "statusContext":
                                     {"containerID": "sim://app-1", "restartCount": 0}}],
                     "strategy": {"forceRecreate": true}},
        });
        serde_json::from_value(request).expect("a request")
    }

    fn agent(api: &FakeApi) -> Agent<SimRuntime> {
        Agent {
            client: api.client(),
            node: NODE.to_owned(),
            runtime: SimRuntime::new(api.client(), NODE),
            events: Events::new(api.client(), AGENT_NAME),
            backoff: Backoff::default(),
            pod_locks: Mutex::default(),
        }
    }

    /// The container stops the agent went to make (each announced by a
    /// `Killing` event on the pod before the runtime is asked).
    fn stops(api: &FakeApi) -> usize {
        api.writes()
            .iter()
            .filter(|w| w.body["reason"] == "Killing" && w.body["regarding"]["name"] == "web")
            .count()
    }

    /// A stop's record survives the manager writing the request in
    /// between (a conflict, retried on the fresh version), but is not
    /// written over a request the manager has completed.
    #[tokio::test]
    async fn a_kill_is_recorded_over_a_concurrent_write() {
        let path =
            "/apis/apps.kruise.io/v1alpha1/namespaces/default/containerrecreaterequests/restart";
        for (phase_then, recorded) in [("Recreating", true), ("Completed", false)] {
            let api = FakeApi::default();
            let mut request = serde_json::to_value(request("web-uid")).expect("json");
            request["status"] = json!({"phase": "Recreating"});
            let stale: ContainerRecreateRequest =
                serde_json::from_value(api.insert("containerrecreaterequests", request))
                    .expect("a request");
            let requests: Api<Stored<ContainerRecreateRequest>> =
                Api::namespaced(api.client(), "default");
            // The manager's write in between.
            let between = json!({"metadata": {"annotations": {"snapshot": "1"}},
                                 "status": {"phase": phase_then}});
            requests
                .patch_status("restart", &PatchParams::default(), &Patch::Merge(between))
                .await
                .expect("the manager's write");
            let killed: ContainerState = serde_json::from_value(
                json!({"name": "app", "phase": "Recreating", "isKilled": true}),
            )
            .expect("a state");
            record_kill(&requests, &stale, vec![killed])
                .await
                .expect("recorded");
            let stored = api.get(path).expect("the request");
            let states = &stored["status"]["containerRecreateStates"];
            assert_eq!(states.is_array(), recorded, "{phase_then}: {stored}");
        }
    }

    /// The agent stops a forced recreation's container and goes down
    /// before it records the stop (here: the record refused); kubelet
    /// starts the container again. The agent back (a new one) finds the
    /// instance it noted gone and records the stop instead of stopping the
    /// new instance too.
    #[tokio::test]
    async fn a_forced_stop_is_made_once_across_a_crash() {
        let api = FakeApi::default();
        api.insert("pods", pod("web-uid"));
        let mut request = serde_json::to_value(request("web-uid")).expect("json");
        request["status"] = json!({"phase": "Recreating", "containerRecreateStates":
                                   [{"name": "app", "phase": "Pending"}]});
        let stored = api.insert("containerrecreaterequests", request);
        let trigger: ContainerRecreateRequest = serde_json::from_value(stored).expect("a request");

        api.refuse("PATCH", "containerrecreaterequests/status");
        assert!(
            round(&agent(&api), &trigger).await.is_err(),
            "the record lost"
        );
        assert_eq!(stops(&api), 1);
        // kubelet starts app again.
        let restarted = json!({"status": {"containerStatuses": [{
            "name": "app", "image": "busybox", "imageID": "", "ready": true,
            "restartCount": 1, "containerID": "sim://app-2",
            "state": {"running": {"startedAt": Timestamp::now().to_string()}},
        }]}});
        Api::<Pod>::namespaced(api.client(), "default")
            .patch_status("web", &PatchParams::default(), &Patch::Merge(restarted))
            .await
            .expect("the restart");
        api.accept("PATCH", "containerrecreaterequests/status");

        round(&agent(&api), &trigger).await.expect("a round");
        assert_eq!(stops(&api), 1, "app-2 stopped too");
        let path =
            "/apis/apps.kruise.io/v1alpha1/namespaces/default/containerrecreaterequests/restart";
        let stored = api.get(path).expect("the request");
        assert_eq!(
            stored["status"]["containerRecreateStates"][0]["isKilled"], true,
            "{stored}"
        );
    }

    /// A note on a version of the request that is no longer the stored
    /// one (the manager wrote meanwhile) is no failure: none is written,
    /// and the step is planned again on the request as it now is.
    #[tokio::test]
    async fn a_stop_note_on_a_stale_version_is_planned_again() {
        let api = FakeApi::default();
        let stored = api.insert(
            "containerrecreaterequests",
            serde_json::to_value(request("web-uid")).expect("json"),
        );
        let stale: ContainerRecreateRequest = serde_json::from_value(stored).expect("a request");
        let requests: Api<Stored<ContainerRecreateRequest>> =
            Api::namespaced(api.client(), "default");
        let between = json!({"metadata": {"annotations": {"snapshot": "1"}}});
        requests
            .patch("restart", &PatchParams::default(), &Patch::Merge(between))
            .await
            .expect("the manager's write");
        let noted = note_stop(&requests, &stale, "{}")
            .await
            .expect("no failure");
        assert!(noted.is_none());
        let fresh = requests.get("restart").await.expect("the request");
        let fresh = fresh.object.expect("readable");
        let noted = note_stop(&requests, &fresh, "{}")
            .await
            .expect("no failure");
        let annotations = noted
            .and_then(|r| r.metadata.annotations)
            .unwrap_or_default();
        assert_eq!(
            annotations
                .get(daemon::STOPPING_ANNOTATION)
                .map(String::as_str),
            Some("{}")
        );
    }

    /// A request whose pod was replaced by one of the same name (a
    /// StatefulSet's, recreated on the node) leaves the new pod's
    /// containers alone; the pod it names gets its container stopped.
    #[tokio::test]
    async fn only_the_pod_the_request_names_is_touched() {
        for (pod_uid, stopped) in [("old-uid", 0), ("web-uid", 1)] {
            let api = FakeApi::default();
            api.insert("pods", pod("web-uid"));
            let stored = api.insert(
                "containerrecreaterequests",
                serde_json::to_value(request(pod_uid)).expect("json"),
            );
            let trigger: ContainerRecreateRequest =
                serde_json::from_value(stored).expect("a request");
            round(&agent(&api), &trigger).await.expect("a round");
            assert_eq!(stops(&api), stopped, "request for {pod_uid}");
        }
    }
}
