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
}

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
        let pod = self.pod_running(container_id).await?;
        let mut all: Vec<ContainerStatus> = statuses(&pod).cloned().collect();
        let Some(status) = all
            .iter_mut()
            .find(|s| s.container_id.as_deref() == Some(container_id))
        else {
            return Ok(());
        };
        let Some(running) = status.state.as_ref().and_then(|s| s.running.clone()) else {
            return Ok(()); // already stopped
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
        Api::<Pod>::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default())
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map(drop)
            .map_err(|e| RuntimeError::Failed(format!("cannot stop {container_id}: {e}")))
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
