//! The container runtime as the agent needs it: list a pod's containers,
//! run a command in one, stop one; look an image up, pull one. Two
//! implementations: [`crate::cri`]
//! (the node's real runtime over its CRI socket) and [`crate::sim`] (the
//! dev cluster's simulated nodes, where the pod status is the runtime).

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
pub use kruise_api::nodeimage::SandboxConfig;
pub use kruise_core::crr::daemon::{RuntimeContainer, RuntimeState};
pub use kruise_core::imagepull::secrets::Credential;

/// What a command run in a container (a preStop exec hook) gave back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime does not answer (socket gone, daemon restarting): worth
    /// retrying later.
    #[error("the container runtime is unavailable: {0}")]
    Unavailable(String),
    /// The container (or pod) is not known to the runtime.
    #[error("not found: {0}")]
    NotFound(String),
    /// Anything else the runtime said.
    #[error("{0}")]
    Failed(String),
}

/// A node's container runtime. Container IDs carry the runtime's prefix,
/// as in a pod's status (`containerd://<id>`).
pub trait ContainerRuntime: Clone + Send + Sync + 'static {
    /// Every container instance of this pod, running or exited.
    fn pod_containers(
        &self,
        pod: &Pod,
    ) -> impl Future<Output = Result<Vec<RuntimeContainer>, RuntimeError>> + Send;

    /// Runs `command` in the container and waits at most `timeout`.
    fn exec(
        &self,
        container_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> impl Future<Output = Result<ExecOutput, RuntimeError>> + Send;

    /// Stops the container: SIGTERM, then SIGKILL after `grace`. Stopping a
    /// stopped container succeeds.
    fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// The image's ID (`sha256:...`) if the node has it.
    fn image_id(
        &self,
        reference: &str,
    ) -> impl Future<Output = Result<Option<String>, RuntimeError>> + Send;

    /// Pulls the image, with `credential` if given (anonymously if not),
    /// and returns its ID. The caller bounds how long it may take.
    fn pull_image(
        &self,
        reference: &str,
        credential: Option<&Credential>,
        sandbox: Option<&SandboxConfig>,
    ) -> impl Future<Output = Result<String, RuntimeError>> + Send;
}
