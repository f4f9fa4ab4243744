//! The container runtime of the dev cluster's simulated nodes. A simulated
//! node has no containers: its kubelet stand-in writes pod statuses, so
//! the pod status *is* the runtime. Stopping a container marks it
//! terminated in the status, and the simulated kubelet starts a new
//! instance (new containerID, restartCount + 1), as kubelet does after a
//! real stop. Commands cannot run in a simulated container: an exec hook
//! succeeds without running anything.
//!
//! Images live in memory, one store per node: a pull takes
//! [`SimPulls::delay`] and fails with probability [`SimPulls::failure_rate`],
//! else stores an ID made from the reference.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState as PodContainerState, ContainerStateTerminated, ContainerStatus, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_controller_runtime::api_error::is_conflict;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::runtime::{
    ContainerRuntime, Credential, ExecOutput, RuntimeContainer, RuntimeError, RuntimeState,
    SandboxConfig,
};

/// How simulated pulls behave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimPulls {
    /// How long each pull takes.
    pub delay: Duration,
    /// The share of pulls that fail, from 0 (none) to 1 (all).
    pub failure_rate: f64,
}

impl Default for SimPulls {
    fn default() -> Self {
        Self {
            delay: Duration::from_secs(1),
            failure_rate: 0.0,
        }
    }
}

/// The simulated runtime of one node.
#[derive(Clone)]
pub struct SimRuntime {
    client: Client,
    node: String,
    pulls: SimPulls,
    /// Reference → image ID.
    images: Arc<Mutex<BTreeMap<String, String>>>,
}

impl std::fmt::Debug for SimRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimRuntime")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl SimRuntime {
    pub fn new(client: Client, node: &str) -> Self {
        Self::with_pulls(client, node, SimPulls::default())
    }

    pub fn with_pulls(client: Client, node: &str, pulls: SimPulls) -> Self {
        Self {
            client,
            node: node.to_owned(),
            pulls,
            images: Arc::default(),
        }
    }

    fn images(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pod on this node running the container with this ID.
    async fn pod_running(&self, container_id: &str) -> Result<Pod, RuntimeError> {
        let on_node = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
        let pods = Api::<Pod>::all(self.client.clone())
            .list(&on_node)
            .await
            .map_err(|e| RuntimeError::Unavailable(format!("cannot list the node's pods: {e}")))?;
        pods.items
            .into_iter()
            .find(|pod| statuses(pod).any(|s| s.container_id.as_deref() == Some(container_id)))
            .ok_or_else(|| RuntimeError::NotFound(format!("container {container_id}")))
    }

    /// One try at stopping a container: its pod read, its status written
    /// on the version read.
    async fn stop_once(&self, container_id: &str) -> Result<Stop, RuntimeError> {
        let pod = self.pod_running(container_id).await?;
        let mut all: Vec<ContainerStatus> = statuses(&pod).cloned().collect();
        let Some(status) = all
            .iter_mut()
            .find(|s| s.container_id.as_deref() == Some(container_id))
        else {
            return Ok(Stop::Done);
        };
        let Some(running) = status.state.as_ref().and_then(|s| s.running.clone()) else {
            return Ok(Stop::Done); // already stopped
        };
        // SIGTERM honoured: exit code 143, as a process ended by it.
        status.state = Some(PodContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 143,
                reason: Some("Error".to_owned()),
                container_id: Some(container_id.to_owned()),
                started_at: running.started_at,
                finished_at: Some(Time(Timestamp::now())),
                ..ContainerStateTerminated::default()
            }),
            ..PodContainerState::default()
        });
        status.ready = false;
        status.started = Some(false);
        // containerStatuses is replaced whole by any patch: send all of it,
        // on the version it was read from.
        let patch = json!({
            "metadata": {"resourceVersion": pod.metadata.resource_version},
            "status": {"containerStatuses": all},
        });
        match Api::<Pod>::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default())
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => Ok(Stop::Done),
            Err(e) if is_conflict(&e) => Ok(Stop::Conflict),
            Err(e) => Err(RuntimeError::Failed(format!(
                "cannot stop {container_id}: {e}"
            ))),
        }
    }
}

/// What one try at a stop came to.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    Done,
    /// The pod changed since it was read: try again.
    Conflict,
}

/// Tries at a stop before it fails (each conflict is another client's
/// write in between).
const STOP_ATTEMPTS: u32 = 5;

impl ContainerRuntime for SimRuntime {
    async fn pod_containers(&self, pod: &Pod) -> Result<Vec<RuntimeContainer>, RuntimeError> {
        Ok(statuses(pod).filter_map(instance).collect())
    }

    async fn exec(
        &self,
        container_id: &str,
        _command: &[String],
        _timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        self.pod_running(container_id).await?;
        Ok(ExecOutput::default())
    }

    async fn stop_container(
        &self,
        container_id: &str,
        _grace: Duration,
    ) -> Result<(), RuntimeError> {
        // The simulated kubelet and the manager write the same pod status:
        // a stop that meets their write is read again and sent again, as a
        // real runtime's stop does not depend on the pod's version.
        for _ in 0..STOP_ATTEMPTS {
            if self.stop_once(container_id).await? == Stop::Done {
                return Ok(());
            }
        }
        Err(RuntimeError::Failed(format!(
            "cannot stop {container_id}: its pod kept changing ({STOP_ATTEMPTS} conflicts)"
        )))
    }

    async fn image_id(&self, reference: &str) -> Result<Option<String>, RuntimeError> {
        Ok(self.images().get(reference).cloned())
    }

    async fn pull_image(
        &self,
        reference: &str,
        _credential: Option<&Credential>,
        _sandbox: Option<&SandboxConfig>,
    ) -> Result<String, RuntimeError> {
        tokio::time::sleep(self.pulls.delay).await;
        if fails(self.pulls.failure_rate) {
            return Err(RuntimeError::Failed(format!(
                "simulated pull failure of {reference} on {}",
                self.node
            )));
        }
        let id = format!("sha256:{:064x}", RandomState::new().hash_one(reference));
        self.images().insert(reference.to_owned(), id.clone());
        Ok(id)
    }
}

/// A draw that comes out true with probability `rate`.
fn fails(rate: f64) -> bool {
    if rate <= 0.0 {
        return false;
    }
    kruise_controller_runtime::random::random_unit() < rate
}

fn statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
}

/// The container's current instance, if it has one.
fn instance(status: &ContainerStatus) -> Option<RuntimeContainer> {
    let id = status.container_id.clone().filter(|id| !id.is_empty())?;
    let empty = PodContainerState::default();
    let state = status.state.as_ref().unwrap_or(&empty);
    let (runtime_state, started_at) = if let Some(running) = &state.running {
        (
            RuntimeState::Running,
            running.started_at.as_ref().map(|t| t.0),
        )
    } else if state.terminated.is_some() {
        (RuntimeState::Exited, None)
    } else {
        (RuntimeState::Created, None)
    };
    Some(RuntimeContainer {
        id,
        name: status.name.clone(),
        state: runtime_state,
        restart_count: status.restart_count,
        started_at,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kruise_controller_runtime::testing::FakeApi;

    use super::*;

    fn pod_running_app() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "busybox"}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "app", "image": "busybox", "imageID": "", "ready": true,
                "restartCount": 0, "containerID": "sim://app-1",
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            }]},
        })
    }

    fn app_state(api: &FakeApi) -> serde_json::Value {
        let pod = api.get("/api/v1/namespaces/default/pods/web").unwrap();
        pod["status"]["containerStatuses"][0]["state"].clone()
    }

    #[tokio::test]
    async fn a_stop_that_meets_another_write_is_sent_again() {
        let api = FakeApi::default();
        api.insert("pods", pod_running_app());
        api.conflict_once("PATCH", "pods");
        let runtime = SimRuntime::new(api.client(), "node-1");

        runtime
            .stop_container("sim://app-1", Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(app_state(&api)["terminated"]["exitCode"], 143);
    }

    #[tokio::test]
    async fn a_stop_that_keeps_meeting_writes_fails_saying_so() {
        let api = FakeApi::default();
        api.insert("pods", pod_running_app());
        for _ in 0..STOP_ATTEMPTS {
            api.conflict_once("PATCH", "pods");
        }
        let runtime = SimRuntime::new(api.client(), "node-1");

        let failed = runtime.stop_container("sim://app-1", Duration::ZERO).await;
        assert!(
            matches!(&failed, Err(RuntimeError::Failed(m)) if m.contains("kept changing")),
            "{failed:?}"
        );
        assert!(app_state(&api)["running"].is_object());
    }
}
