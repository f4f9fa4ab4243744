//! `CriRuntime` against a fake CRI `RuntimeService` on a unix socket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kruise_node_agent::cri::CriRuntime;
use kruise_node_agent::runtime::{
    ContainerRuntime, ExecOutput, RuntimeContainer, RuntimeError, RuntimeState,
};
use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status};

/// What the fake was asked.
#[derive(Debug, Default)]
struct Recorded {
    list_filters: Vec<Option<cri::ContainerFilter>>,
    /// (container id, timeout)
    stops: Vec<(String, i64)>,
    /// (container id, command, timeout)
    execs: Vec<(String, Vec<String>, i64)>,
}

#[derive(Clone, Debug, Default)]
struct Fake {
    runtime_name: String,
    /// Listed whatever the filter says, so the client's own check shows.
    containers: Vec<cri::Container>,
    /// `started_at` by container ID; a listed container missing here is
    /// one removed between the list and its status.
    started_at: HashMap<String, i64>,
    recorded: Arc<Mutex<Recorded>>,
}

impl Fake {
    fn named(runtime_name: &str) -> Fake {
        Fake {
            runtime_name: runtime_name.to_owned(),
            ..Fake::default()
        }
    }
}

/// Implements the fake's calls and answers every other RPC `unimplemented`
/// (the generated trait has no default methods). The whole impl is made
/// here so that `async_trait` sees every method.
macro_rules! runtime_service {
    (
        $fake:ty { $($implemented:tt)* }
        unimplemented: $($method:ident($req:ident) -> $resp:ident),* $(,)?
    ) => {
        #[tonic::async_trait]
        impl RuntimeService for $fake {
            $($implemented)*
            $(
                async fn $method(
                    &self,
                    _: Request<cri::$req>,
                ) -> Result<Response<cri::$resp>, Status> {
                    Err(Status::unimplemented(stringify!($method)))
                }
            )*
        }
    };
}

runtime_service! {
    Fake {
        type GetContainerEventsStream =
            tokio_stream::Empty<Result<cri::ContainerEventResponse, Status>>;

        async fn version(
            &self,
            _: Request<cri::VersionRequest>,
        ) -> Result<Response<cri::VersionResponse>, Status> {
            Ok(Response::new(cri::VersionResponse {
                version: "0.1.0".to_owned(),
                runtime_name: self.runtime_name.clone(),
                runtime_version: "1.6.20".to_owned(),
                runtime_api_version: "v1".to_owned(),
            }))
        }

        async fn list_containers(
            &self,
            request: Request<cri::ListContainersRequest>,
        ) -> Result<Response<cri::ListContainersResponse>, Status> {
            self.recorded.lock().unwrap().list_filters.push(request.into_inner().filter);
            Ok(Response::new(cri::ListContainersResponse {
                containers: self.containers.clone(),
            }))
        }

        async fn container_status(
            &self,
            request: Request<cri::ContainerStatusRequest>,
        ) -> Result<Response<cri::ContainerStatusResponse>, Status> {
            let id = request.into_inner().container_id;
            let started_at = *self
                .started_at
                .get(&id)
                .ok_or_else(|| Status::not_found(format!("container {id} not found")))?;
            Ok(Response::new(cri::ContainerStatusResponse {
                status: Some(cri::ContainerStatus {
                    id,
                    started_at,
                    ..cri::ContainerStatus::default()
                }),
                ..cri::ContainerStatusResponse::default()
            }))
        }

        async fn stop_container(
            &self,
            request: Request<cri::StopContainerRequest>,
        ) -> Result<Response<cri::StopContainerResponse>, Status> {
            let request = request.into_inner();
            self.recorded
                .lock()
                .unwrap()
                .stops
                .push((request.container_id.clone(), request.timeout));
            if self.containers.iter().any(|c| c.id == request.container_id) {
                Ok(Response::new(cri::StopContainerResponse {}))
            } else {
                Err(Status::not_found(format!("container {} not found", request.container_id)))
            }
        }

        async fn exec_sync(
            &self,
            request: Request<cri::ExecSyncRequest>,
        ) -> Result<Response<cri::ExecSyncResponse>, Status> {
            let request = request.into_inner();
            self.recorded.lock().unwrap().execs.push((
                request.container_id,
                request.cmd.clone(),
                request.timeout,
            ));
            if request.cmd.first().map(String::as_str) == Some("hang") {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            Ok(Response::new(cri::ExecSyncResponse {
                stdout: b"hi\n".to_vec(),
                stderr: b"oops".to_vec(),
                exit_code: 3,
            }))
        }

        async fn get_container_events(
            &self,
            _: Request<cri::GetEventsRequest>,
        ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
            Err(Status::unimplemented("get_container_events"))
        }
    }
    unimplemented:
        run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse,
        stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse,
        remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse,
        pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse,
        list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse,
        create_container(CreateContainerRequest) -> CreateContainerResponse,
        start_container(StartContainerRequest) -> StartContainerResponse,
        remove_container(RemoveContainerRequest) -> RemoveContainerResponse,
        update_container_resources(UpdateContainerResourcesRequest)
            -> UpdateContainerResourcesResponse,
        reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse,
        exec(ExecRequest) -> ExecResponse,
        attach(AttachRequest) -> AttachResponse,
        port_forward(PortForwardRequest) -> PortForwardResponse,
        container_stats(ContainerStatsRequest) -> ContainerStatsResponse,
        list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse,
        pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse,
        list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse,
        update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse,
        status(StatusRequest) -> StatusResponse,
        checkpoint_container(CheckpointContainerRequest) -> CheckpointContainerResponse,
        list_metric_descriptors(ListMetricDescriptorsRequest) -> ListMetricDescriptorsResponse,
        list_pod_sandbox_metrics(ListPodSandboxMetricsRequest) -> ListPodSandboxMetricsResponse,
        runtime_config(RuntimeConfigRequest) -> RuntimeConfigResponse,
}

/// A socket path in the temp dir, removed when dropped.
struct SocketPath(PathBuf);

impl SocketPath {
    fn new(tag: &str) -> SocketPath {
        let name = format!("kna-cri-{}-{tag}.sock", std::process::id());
        let path = std::env::temp_dir().join(name);
        let _ = std::fs::remove_file(&path);
        SocketPath(path)
    }
}

impl Drop for SocketPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The fake serving on a socket until stopped.
struct FakeServer {
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

fn serve(path: &Path, fake: Fake) -> FakeServer {
    let _ = std::fs::remove_file(path);
    let incoming = UnixListenerStream::new(UnixListener::bind(path).unwrap());
    let (shutdown, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        Server::builder()
            .add_service(RuntimeServiceServer::new(fake))
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    FakeServer { shutdown, task }
}

impl FakeServer {
    /// Stops serving, as a runtime going down: its socket goes too.
    async fn stop(self, path: &Path) {
        let _ = self.shutdown.send(());
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the fake server stops")
            .unwrap();
        std::fs::remove_file(path).unwrap();
    }
}

/// A socket file nothing listens on any more: connecting is refused.
fn stale_socket(path: &Path) {
    drop(std::os::unix::net::UnixListener::bind(path).unwrap());
}

fn container(
    id: &str,
    uid: &str,
    pod: (&str, &str),
    name: &str,
    attempt: u32,
    state: cri::ContainerState,
) -> cri::Container {
    let labels = HashMap::from([
        ("io.kubernetes.pod.uid".to_owned(), uid.to_owned()),
        ("io.kubernetes.pod.namespace".to_owned(), pod.0.to_owned()),
        ("io.kubernetes.pod.name".to_owned(), pod.1.to_owned()),
        ("io.kubernetes.container.name".to_owned(), name.to_owned()),
    ]);
    cri::Container {
        id: id.to_owned(),
        pod_sandbox_id: "sandbox".to_owned(),
        metadata: Some(cri::ContainerMetadata {
            name: name.to_owned(),
            attempt,
        }),
        state: state.into(),
        labels,
        ..cri::Container::default()
    }
}

fn pod(uid: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some("default".to_owned()),
            name: Some("web-0".to_owned()),
            uid: uid.map(str::to_owned),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

/// A containerd with one pod's containers in it (and some that are not
/// that pod's).
fn containerd_with_pod() -> Fake {
    use cri::ContainerState::{ContainerCreated, ContainerExited, ContainerRunning};
    let web = ("default", "web-0");
    Fake {
        containers: vec![
            container("app0", "uid-1", web, "app", 0, ContainerExited),
            container("app1", "uid-1", web, "app", 1, ContainerRunning),
            container("side0", "uid-1", web, "sidecar", 0, ContainerCreated),
            container(
                "other",
                "uid-2",
                ("default", "web-1"),
                "app",
                0,
                ContainerRunning,
            ),
            container(
                "renamed",
                "uid-1",
                ("other-ns", "web-0"),
                "app",
                0,
                ContainerRunning,
            ),
            container("removed", "uid-1", web, "app", 2, ContainerExited),
        ],
        started_at: HashMap::from([
            ("app0".to_owned(), 1_700_000_000_000_000_001),
            ("app1".to_owned(), 1_700_000_100_500_000_000),
            ("side0".to_owned(), 0),
            ("other".to_owned(), 1),
            ("renamed".to_owned(), 1),
        ]),
        ..Fake::named("containerd")
    }
}

fn at(nanos: i128) -> Timestamp {
    Timestamp::from_nanosecond(nanos).unwrap()
}

#[tokio::test]
async fn connects_to_an_explicit_endpoint() {
    let socket = SocketPath::new("explicit");
    let _server = serve(&socket.0, Fake::named("containerd"));

    let runtime = CriRuntime::connect(Some(&socket.0)).await.unwrap();

    assert_eq!(runtime.runtime_name(), "containerd");
    assert_eq!(runtime.endpoint(), socket.0.as_path());
}

#[tokio::test]
async fn connect_any_takes_the_first_runtime_that_answers() {
    let missing = SocketPath::new("any-missing");
    let stale = SocketPath::new("any-stale");
    stale_socket(&stale.0);
    let nameless = SocketPath::new("any-nameless");
    let _nameless_server = serve(&nameless.0, Fake::named(""));
    let live = SocketPath::new("any-live");
    let _server = serve(&live.0, Fake::named("cri-o"));

    let candidates = [
        missing.0.clone(),
        stale.0.clone(),
        nameless.0.clone(),
        live.0.clone(),
    ];
    let runtime = CriRuntime::connect_any(&candidates).await.unwrap();

    assert_eq!(runtime.endpoint(), live.0.as_path());
    assert_eq!(runtime.runtime_name(), "cri-o");
}

#[tokio::test]
async fn the_error_names_every_path_tried_and_why() {
    let missing = SocketPath::new("none-missing");
    let stale = SocketPath::new("none-stale");
    stale_socket(&stale.0);
    let nameless = SocketPath::new("none-nameless");
    let _nameless_server = serve(&nameless.0, Fake::named(""));

    let candidates = [missing.0.clone(), stale.0.clone(), nameless.0.clone()];
    let error = CriRuntime::connect_any(&candidates).await.unwrap_err();

    let RuntimeError::Unavailable(message) = error else {
        panic!("expected Unavailable, got {error:?}");
    };
    let expected = format!(
        "no CRI runtime answered: \
         {}: connect: transport error: No such file or directory (os error 2); \
         {}: connect: transport error: Connection refused (os error 111); \
         {}: Version: the runtime reported no name",
        missing.0.display(),
        stale.0.display(),
        nameless.0.display()
    );
    assert_eq!(message, expected);
}

#[tokio::test]
async fn pod_containers_are_the_pods_listed_containers() {
    let socket = SocketPath::new("list");
    let fake = containerd_with_pod();
    let recorded = fake.recorded.clone();
    let _server = serve(&socket.0, fake);
    let runtime = CriRuntime::connect(Some(&socket.0)).await.unwrap();

    let containers = runtime.pod_containers(&pod(Some("uid-1"))).await.unwrap();

    let expected = vec![
        RuntimeContainer {
            id: "containerd://app0".to_owned(),
            name: "app".to_owned(),
            state: RuntimeState::Exited,
            restart_count: 0,
            started_at: Some(at(1_700_000_000_000_000_001)),
        },
        RuntimeContainer {
            id: "containerd://app1".to_owned(),
            name: "app".to_owned(),
            state: RuntimeState::Running,
            restart_count: 1,
            started_at: Some(at(1_700_000_100_500_000_000)),
        },
        RuntimeContainer {
            id: "containerd://side0".to_owned(),
            name: "sidecar".to_owned(),
            state: RuntimeState::Created,
            restart_count: 0,
            started_at: None,
        },
    ];
    assert_eq!(containers, expected);
    let filters = &recorded.lock().unwrap().list_filters;
    let expected_filter = cri::ContainerFilter {
        label_selector: HashMap::from([("io.kubernetes.pod.uid".to_owned(), "uid-1".to_owned())]),
        ..cri::ContainerFilter::default()
    };
    assert_eq!(filters, &vec![Some(expected_filter)]);
}

#[tokio::test]
async fn a_pod_without_uid_is_refused() {
    let socket = SocketPath::new("no-uid");
    let _server = serve(&socket.0, containerd_with_pod());
    let runtime = CriRuntime::connect(Some(&socket.0)).await.unwrap();

    let error = runtime.pod_containers(&pod(None)).await.unwrap_err();

    assert!(
        matches!(&error, RuntimeError::Failed(m) if m == "pod default/web-0 has no uid"),
        "{error:?}"
    );
}

#[tokio::test]
async fn stop_sends_the_grace_period_and_maps_not_found() {
    let socket = SocketPath::new("stop");
    let fake = containerd_with_pod();
    let recorded = fake.recorded.clone();
    let _server = serve(&socket.0, fake);
    let runtime = CriRuntime::connect(Some(&socket.0)).await.unwrap();

    runtime
        .stop_container("containerd://app1", Duration::from_secs(30))
        .await
        .unwrap();
    // A grace period past any gRPC deadline: the deadline is capped.
    runtime
        .stop_container("containerd://app1", Duration::from_secs(400_000_000_000))
        .await
        .unwrap();
    let gone = runtime
        .stop_container("containerd://gone", Duration::from_millis(1500))
        .await;
    let foreign = runtime.stop_container("cri-o://app1", Duration::ZERO).await;
    let bare = runtime.stop_container("app1", Duration::ZERO).await;

    assert!(
        matches!(&gone, Err(RuntimeError::NotFound(m)) if m == "container gone not found"),
        "{gone:?}"
    );
    for refused in [foreign, bare] {
        assert!(
            matches!(&refused, Err(RuntimeError::Failed(m)) if m.contains("expected containerd://<id>")),
            "{refused:?}"
        );
    }
    let stops = &recorded.lock().unwrap().stops;
    assert_eq!(
        stops,
        &vec![
            ("app1".to_owned(), 30),
            ("app1".to_owned(), 400_000_000_000),
            ("gone".to_owned(), 2)
        ]
    );
}

#[tokio::test]
async fn exec_returns_the_output_and_sends_the_timeout() {
    let socket = SocketPath::new("exec");
    let fake = containerd_with_pod();
    let recorded = fake.recorded.clone();
    let _server = serve(&socket.0, fake);
    let runtime = CriRuntime::connect(Some(&socket.0)).await.unwrap();
    let command = vec!["sh".to_owned(), "-c".to_owned(), "echo hi".to_owned()];

    let output = runtime
        .exec("containerd://app1", &command, Duration::from_millis(1500))
        .await
        .unwrap();
    runtime
        .exec("containerd://app1", &command, Duration::ZERO)
        .await
        .unwrap();

    let expected = ExecOutput {
        exit_code: 3,
        stdout: b"hi\n".to_vec(),
        stderr: b"oops".to_vec(),
    };
    assert_eq!(output, expected);
    let execs = &recorded.lock().unwrap().execs;
    assert_eq!(
        execs,
        &vec![
            ("app1".to_owned(), command.clone(), 2),
            ("app1".to_owned(), command.clone(), 1)
        ]
    );
}

#[tokio::test]
async fn an_exec_the_runtime_never_answers_gives_up() {
    let socket = SocketPath::new("exec-hang");
    let _server = serve(&socket.0, containerd_with_pod());
    let runtime = CriRuntime::connect(Some(&socket.0))
        .await
        .unwrap()
        .with_call_timeout(Duration::from_millis(200));
    let started = Instant::now();

    let result = runtime
        .exec(
            "containerd://app1",
            &["hang".to_owned()],
            Duration::from_millis(100),
        )
        .await;

    assert!(
        matches!(&result, Err(RuntimeError::Unavailable(m)) if m.ends_with("no answer within 300ms")),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_restarted_runtime_is_reached_again() {
    let socket = SocketPath::new("restart");
    let server = serve(&socket.0, containerd_with_pod());
    let runtime = CriRuntime::connect(Some(&socket.0)).await.unwrap();
    let web = pod(Some("uid-1"));
    assert_eq!(runtime.pod_containers(&web).await.unwrap().len(), 3);

    server.stop(&socket.0).await;
    let while_down = runtime.pod_containers(&web).await;
    let _server = serve(&socket.0, containerd_with_pod());
    let after_restart = runtime.pod_containers(&web).await;

    assert!(
        matches!(&while_down, Err(RuntimeError::Unavailable(_))),
        "{while_down:?}"
    );
    assert_eq!(after_restart.unwrap().len(), 3);
}
