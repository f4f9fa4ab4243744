//! The node's real container runtime, over its CRI socket (`runtime.v1`
//! gRPC on a unix socket), as kubelet and kruise-daemon reach it.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::try_join_all;
use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    AuthConfig, Container, ContainerFilter, ContainerState, ContainerStatusRequest,
    ExecSyncRequest, ImageSpec, ImageStatusRequest, ListContainersRequest, PodSandboxConfig,
    PullImageRequest, StopContainerRequest, VersionRequest,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Request, Response, Status};

use crate::runtime::{
    ContainerRuntime, Credential, ExecOutput, RuntimeContainer, RuntimeError, RuntimeState,
    SandboxConfig,
};

/// The sockets kruise-daemon looks for under the host's `/var/run`, in its
/// order (containerd, CRI-O, cri-dockerd), plus containerd's `/run` path
/// for hosts where `/var/run` is not a link to `/run`.
pub const DEFAULT_ENDPOINTS: &[&str] = &[
    "/var/run/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/run/containerd/containerd.sock",
    "/var/run/crio.sock",
    "/var/run/crio/crio.sock",
    "/var/run/cri-dockerd.sock",
    "/var/run/cri-dockerd/cri-dockerd.sock",
];

/// How long any call may take before the runtime counts as unavailable;
/// exec and stop get this on top of their own timeout.
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The CRI API version this client speaks, sent with `Version`.
const CRI_API_VERSION: &str = "v1";

// The labels kubelet puts on every container it creates.
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// A CRI runtime reached over its unix socket.
#[derive(Clone, Debug)]
pub struct CriRuntime {
    endpoint: PathBuf,
    runtime_name: String,
    /// `<runtime name>://`, the prefix of container IDs in pod statuses.
    id_prefix: String,
    client: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    call_timeout: Duration,
}

impl CriRuntime {
    /// Connects to `endpoint`, or without one to the first of
    /// [`DEFAULT_ENDPOINTS`] whose runtime answers `Version`.
    pub async fn connect(endpoint: Option<&Path>) -> Result<CriRuntime, RuntimeError> {
        let candidates: Vec<PathBuf> = match endpoint {
            Some(path) => vec![path.to_path_buf()],
            None => DEFAULT_ENDPOINTS.iter().map(PathBuf::from).collect(),
        };
        Self::connect_any(&candidates).await
    }

    /// Connects to the first of `candidates` whose runtime answers
    /// `Version`. When none does, the error names each path and why.
    pub async fn connect_any(candidates: &[PathBuf]) -> Result<CriRuntime, RuntimeError> {
        let mut failures = String::new();
        for path in candidates {
            match Self::connect_one(path).await {
                Ok(runtime) => return Ok(runtime),
                Err(why) => {
                    let separator = if failures.is_empty() { "" } else { "; " };
                    let _ = write!(failures, "{separator}{}: {why}", path.display());
                }
            }
        }
        if failures.is_empty() {
            failures.push_str("no socket paths given");
        }
        Err(RuntimeError::Unavailable(format!(
            "no CRI runtime answered: {failures}"
        )))
    }

    /// Replaces the deadline of every call (10 s by default).
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The socket this runtime answers on.
    pub fn endpoint(&self) -> &Path {
        &self.endpoint
    }

    /// The name the runtime reports (`containerd`, `cri-o`).
    pub fn runtime_name(&self) -> &str {
        &self.runtime_name
    }

    async fn connect_one(path: &Path) -> Result<CriRuntime, String> {
        let channel = open_channel(path)
            .await
            .map_err(|error| format!("connect: {}", error_chain(&error)))?;
        let mut runtime = CriRuntime {
            endpoint: path.to_path_buf(),
            runtime_name: String::new(),
            id_prefix: String::new(),
            client: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
            call_timeout: DEFAULT_CALL_TIMEOUT,
        };
        let request = VersionRequest {
            version: CRI_API_VERSION.to_owned(),
        };
        let mut client = runtime.client.clone();
        let version = runtime
            .call(runtime.call_timeout, request, |r| client.version(r))
            .await
            .map_err(|error| format!("Version: {error}"))?;
        if version.runtime_name.is_empty() {
            return Err("Version: the runtime reported no name".to_owned());
        }
        runtime.id_prefix = format!("{}://", version.runtime_name);
        runtime.runtime_name = version.runtime_name;
        Ok(runtime)
    }

    /// Sends one request with a deadline (at most
    /// [`LONGEST_GRPC_TIMEOUT`]): as `grpc-timeout` for the runtime, and
    /// enforced here too in case the runtime hangs.
    async fn call<Req, Resp, Fut>(
        &self,
        deadline: Duration,
        message: Req,
        send: impl FnOnce(Request<Req>) -> Fut,
    ) -> Result<Resp, RuntimeError>
    where
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let deadline = deadline.min(LONGEST_GRPC_TIMEOUT);
        let mut request = Request::new(message);
        request.set_timeout(deadline);
        match tokio::time::timeout(deadline, send(request)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(self.status_error(&status, deadline)),
            Err(_) => Err(RuntimeError::Unavailable(format!(
                "{}: no answer within {deadline:?}",
                self.endpoint.display()
            ))),
        }
    }

    fn status_error(&self, status: &Status, deadline: Duration) -> RuntimeError {
        let endpoint = self.endpoint.display();
        // A status made on this side keeps its cause: the transport failed
        // (socket gone, refused, broken) or the deadline passed.
        if let Some(cause) = status.source() {
            let why = if status.code() == Code::Cancelled {
                format!("no answer within {deadline:?}")
            } else {
                with_causes(status.message(), Some(cause))
            };
            return RuntimeError::Unavailable(format!("{endpoint}: {why}"));
        }
        match status.code() {
            Code::Unavailable => {
                RuntimeError::Unavailable(format!("{endpoint}: {}", status.message()))
            }
            Code::NotFound => RuntimeError::NotFound(status.message().to_owned()),
            code => RuntimeError::Failed(format!("{code:?}: {}", status.message())),
        }
    }

    /// The runtime's own ID from a prefixed one (`containerd://abc` → `abc`).
    fn local_id<'a>(&self, container_id: &'a str) -> Result<&'a str, RuntimeError> {
        match container_id.strip_prefix(&self.id_prefix) {
            Some(id) if !id.is_empty() => Ok(id),
            _ => Err(RuntimeError::Failed(format!(
                "container ID {container_id:?} is not one of this node's {} runtime (expected {}<id>)",
                self.runtime_name, self.id_prefix
            ))),
        }
    }

    /// The pod's containers as `ListContainers` reports them, checked
    /// against all three pod labels in case the runtime ignores the filter.
    async fn list_pod_containers(&self, pod: &Pod) -> Result<Vec<Container>, RuntimeError> {
        let meta = &pod.metadata;
        let uid = meta
            .uid
            .as_deref()
            .filter(|uid| !uid.is_empty())
            .ok_or_else(|| {
                RuntimeError::Failed(format!(
                    "pod {}/{} has no uid",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                ))
            })?;
        let request = ListContainersRequest {
            filter: Some(ContainerFilter {
                label_selector: HashMap::from([(LABEL_POD_UID.to_owned(), uid.to_owned())]),
                ..ContainerFilter::default()
            }),
        };
        let mut client = self.client.clone();
        let listed = self
            .call(self.call_timeout, request, |r| client.list_containers(r))
            .await?;
        let wanted = [
            (LABEL_POD_UID, Some(uid)),
            (LABEL_POD_NAMESPACE, meta.namespace.as_deref()),
            (LABEL_POD_NAME, meta.name.as_deref()),
        ];
        Ok(listed
            .containers
            .into_iter()
            .filter(|container| has_labels(container, &wanted))
            .collect())
    }

    /// One listed container with its start time; `None` when it was
    /// removed in between.
    async fn describe(
        &self,
        container: Container,
    ) -> Result<Option<RuntimeContainer>, RuntimeError> {
        let request = ContainerStatusRequest {
            container_id: container.id.clone(),
            verbose: false,
        };
        let mut client = self.client.clone();
        let started_at = match self
            .call(self.call_timeout, request, |r| client.container_status(r))
            .await
        {
            Ok(response) => response
                .status
                .and_then(|status| timestamp(status.started_at)),
            Err(RuntimeError::NotFound(_)) => return Ok(None),
            Err(error) => return Err(error),
        };
        let metadata = container.metadata.unwrap_or_default();
        let name = match container.labels.get(LABEL_CONTAINER_NAME) {
            Some(name) => name.clone(),
            None => metadata.name,
        };
        Ok(Some(RuntimeContainer {
            id: format!("{}{}", self.id_prefix, container.id),
            name,
            state: runtime_state(container.state),
            restart_count: i32::try_from(metadata.attempt).unwrap_or(i32::MAX),
            started_at,
        }))
    }
}

impl ContainerRuntime for CriRuntime {
    async fn pod_containers(&self, pod: &Pod) -> Result<Vec<RuntimeContainer>, RuntimeError> {
        let containers = self.list_pod_containers(pod).await?;
        let described = try_join_all(containers.into_iter().map(|c| self.describe(c))).await?;
        Ok(described.into_iter().flatten().collect())
    }

    async fn exec(
        &self,
        container_id: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        let request = ExecSyncRequest {
            container_id: self.local_id(container_id)?.to_owned(),
            cmd: command.to_vec(),
            // The runtime counts whole seconds, and 0 would mean no limit.
            timeout: whole_seconds(timeout).max(1),
        };
        let mut client = self.client.clone();
        let deadline = timeout.saturating_add(self.call_timeout);
        let response = self
            .call(deadline, request, |r| client.exec_sync(r))
            .await?;
        Ok(ExecOutput {
            exit_code: response.exit_code,
            stdout: response.stdout,
            stderr: response.stderr,
        })
    }

    async fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let request = StopContainerRequest {
            container_id: self.local_id(container_id)?.to_owned(),
            timeout: whole_seconds(grace),
        };
        let mut client = self.client.clone();
        let deadline = grace.saturating_add(self.call_timeout);
        self.call(deadline, request, |r| client.stop_container(r))
            .await
            .map(|_| ())
    }

    async fn image_id(&self, reference: &str) -> Result<Option<String>, RuntimeError> {
        let request = ImageStatusRequest {
            image: Some(image_spec(reference)),
            verbose: false,
        };
        let mut images = self.images.clone();
        let response = self
            .call(self.call_timeout, request, |r| images.image_status(r))
            .await?;
        // An image the runtime does not have comes back as no image.
        Ok(response
            .image
            .map(|image| image.id)
            .filter(|id| !id.is_empty()))
    }

    async fn pull_image(
        &self,
        reference: &str,
        credential: Option<&Credential>,
        sandbox: Option<&SandboxConfig>,
    ) -> Result<String, RuntimeError> {
        let request = PullImageRequest {
            image: Some(image_spec(reference)),
            auth: credential.map(|c| AuthConfig {
                username: c.username.clone(),
                password: c.password.clone(),
                ..AuthConfig::default()
            }),
            sandbox_config: sandbox.map(|s| PodSandboxConfig {
                labels: s.labels.clone().into_iter().collect(),
                annotations: s.annotations.clone().into_iter().collect(),
                ..PodSandboxConfig::default()
            }),
        };
        let mut images = self.images.clone();
        // The caller bounds the pull; this deadline only guards a hang.
        let response = self
            .call(Duration::from_hours(24), request, |r| images.pull_image(r))
            .await?;
        Ok(response.image_ref)
    }
}

fn image_spec(reference: &str) -> ImageSpec {
    ImageSpec {
        image: reference.to_owned(),
        ..ImageSpec::default()
    }
}

/// A channel to the socket at `path`. It connects now, so a missing
/// runtime shows at once, and reconnects by itself on a later call after
/// the runtime restarts.
async fn open_channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // The URI only fills the HTTP/2 `:authority`; the connector ignores it.
    Endpoint::from_static("http://localhost")
        .connect_timeout(DEFAULT_CALL_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
}

fn has_labels(container: &Container, wanted: &[(&str, Option<&str>)]) -> bool {
    wanted.iter().all(|(key, value)| match value {
        Some(value) => container.labels.get(*key).map(String::as_str) == Some(*value),
        None => true,
    })
}

fn runtime_state(state: i32) -> RuntimeState {
    match ContainerState::try_from(state) {
        Ok(ContainerState::ContainerCreated) => RuntimeState::Created,
        Ok(ContainerState::ContainerRunning) => RuntimeState::Running,
        Ok(ContainerState::ContainerExited) => RuntimeState::Exited,
        Ok(ContainerState::ContainerUnknown) | Err(_) => RuntimeState::Unknown,
    }
}

/// CRI times are nanoseconds since the epoch; 0 means "not yet".
fn timestamp(nanos: i64) -> Option<Timestamp> {
    if nanos == 0 {
        return None;
    }
    Timestamp::from_nanosecond(i128::from(nanos)).ok()
}

/// `duration` in whole seconds, rounded up so a hook or a grace period is
/// never cut short.
/// The longest `grpc-timeout` there is (eight digits of hours; tonic
/// panics past it): a pod's grace period, which a stop's deadline adds up
/// from, has no bound of its own.
const LONGEST_GRPC_TIMEOUT: Duration = Duration::from_hours(99_999_999);

fn whole_seconds(duration: Duration) -> i64 {
    let seconds = duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0));
    i64::try_from(seconds).unwrap_or(i64::MAX)
}

/// An error with its causes.
fn error_chain(error: &(dyn StdError + 'static)) -> String {
    with_causes(&error.to_string(), error.source())
}

/// `message` followed by each cause, skipping one that repeats its parent.
fn with_causes(message: &str, mut cause: Option<&(dyn StdError + 'static)>) -> String {
    let mut text = message.to_owned();
    let mut last = text.clone();
    while let Some(error) = cause {
        let message = error.to_string();
        if message != last {
            let _ = write!(text, ": {message}");
            last = message;
        }
        cause = error.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_seconds_rounds_up() {
        assert_eq!(whole_seconds(Duration::ZERO), 0);
        assert_eq!(whole_seconds(Duration::from_secs(30)), 30);
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::MAX), i64::MAX);
    }

    #[test]
    fn states_and_times_map() {
        assert_eq!(runtime_state(0), RuntimeState::Created);
        assert_eq!(runtime_state(1), RuntimeState::Running);
        assert_eq!(runtime_state(2), RuntimeState::Exited);
        assert_eq!(runtime_state(3), RuntimeState::Unknown);
        assert_eq!(runtime_state(42), RuntimeState::Unknown);
        assert_eq!(timestamp(0), None);
        assert_eq!(
            timestamp(1_700_000_000_000_000_001).map(Timestamp::as_nanosecond),
            Some(1_700_000_000_000_000_001)
        );
    }
}
