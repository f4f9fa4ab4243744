//! `kruise-manager scale-bench`: a CloneSet of thousands of pods, with a
//! SidecarSet matching them, scaled up and rolled out on the dev cluster's
//! simulated nodes by one or more manager binaries in turn (the same
//! cluster, the same steps), each as a process of its own so its CPU time
//! and memory are its alone. For each step it reports the wall time, the
//! manager's requests by verb and resource (its own counter), the API
//! server's (every client: the scheduler, the simulated kubelets, ...) and
//! the bytes the API server answered with.

mod counters;
mod process;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kruise_api::{CloneSet, SidecarSet};
use kruise_core::cloneset::predownload::PARALLELISM_ANNOTATION;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::dev::{DevEnvironment, DevOptions};
use counters::{
    APISERVER_REQUESTS, APISERVER_RESPONSE_BYTES, Counts, MANAGER_REQUESTS, growth, writes,
};

/// How long one step may take before the benchmark gives up.
const STEP_DEADLINE: Duration = Duration::from_mins(10);
/// How often a step's progress is written to stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);
/// A simulated node takes 110 pods, as a kubelet does by default.
const PODS_PER_NODE: usize = 110;
const NAMESPACE: &str = "default";
const APP_LABEL: &str = "scale-bench";

#[derive(Debug, Clone)]
pub struct ScaleOptions {
    pub pods: u32,
    /// `ReCreate` or `InPlaceIfPossible`.
    pub strategy: String,
    /// The manager binaries to compare, run in this order.
    pub managers: Vec<PathBuf>,
    /// The managers' RUST_LOG.
    pub manager_log: String,
    /// Nodes pulling the new image at once during an in-place rollout
    /// (image pre-download, off when None).
    pub predownload: Option<u32>,
}

/// One step of one manager's run.
#[derive(Debug)]
struct StepReport {
    manager: String,
    step: &'static str,
    wall: Duration,
    cpu_seconds: f64,
    peak_rss_bytes: u64,
    manager_requests: Counts,
    apiserver_requests: Counts,
    apiserver_bytes: Counts,
    /// Reconcile rounds by controller.
    rounds: BTreeMap<String, f64>,
}

/// Runs the benchmark and returns its report (Markdown).
pub async fn run(options: &ScaleOptions) -> Result<String, String> {
    if !matches!(options.strategy.as_str(), "ReCreate" | "InPlaceIfPossible") {
        return Err(format!(
            "--strategy {}: ReCreate or InPlaceIfPossible",
            options.strategy
        ));
    }
    let pods = usize::try_from(options.pods).map_err(|e| e.to_string())?;
    // Room for the 10 % surge, and one node spare.
    let sim_nodes = (pods + pods / 10).div_ceil(PODS_PER_NODE) + 1;
    let environment = DevEnvironment::start(DevOptions {
        sim_nodes,
        run_controllers: false,
        ..DevOptions::default()
    })
    .await?;
    let client = environment.client();
    create_sidecarset(&client).await?;
    let mut reports = Vec::new();
    for (index, binary) in options.managers.iter().enumerate() {
        let name = format!("scale-{index}");
        eprintln!("{}: {pods} pods, {}", binary.display(), options.strategy);
        let mut manager =
            Manager::start(binary, environment.kubeconfig(), &options.manager_log).await?;
        let outcome = run_steps(&client, &mut manager, &name, options).await;
        manager.stop();
        reports.extend(outcome?);
        remove(&client, &name).await?;
    }
    Ok(render(options, sim_nodes, &reports))
}

async fn run_steps(
    client: &Client,
    manager: &mut Manager,
    name: &str,
    options: &ScaleOptions,
) -> Result<Vec<StepReport>, String> {
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), NAMESPACE);
    let replicas = i32::try_from(options.pods).map_err(|e| e.to_string())?;
    let mut reports = Vec::new();

    let started = Sample::take(client, manager).await?;
    let cloneset = cloneset(name, options)?;
    clonesets
        .create(&PostParams::default(), &cloneset)
        .await
        .map_err(|e| format!("cannot create CloneSet {name}: {e}"))?;
    converged(&clonesets, name, replicas).await?;
    reports.push(started.report("scale up", client, manager).await?);

    let started = Sample::take(client, manager).await?;
    let new_image = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "nginx:1.27"}]}}}});
    clonesets
        .patch(name, &PatchParams::default(), &Patch::Merge(&new_image))
        .await
        .map_err(|e| format!("cannot change CloneSet {name}'s image: {e}"))?;
    converged(&clonesets, name, replicas).await?;
    reports.push(started.report("rollout", client, manager).await?);
    Ok(reports)
}

fn cloneset(name: &str, options: &ScaleOptions) -> Result<CloneSet, String> {
    let annotations: BTreeMap<&str, String> = options
        .predownload
        .map(|n| (PARALLELISM_ANNOTATION, n.to_string()))
        .into_iter()
        .collect();
    let (replicas, strategy) = (options.pods, &options.strategy);
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP_LABEL, "run": name}},
            "template": {
                "metadata": {"labels": {"app": APP_LABEL, "run": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.26"}]},
            },
            "updateStrategy": {"type": strategy, "maxSurge": "10%", "maxUnavailable": "10%"},
        },
    }))
    .map_err(|e| format!("the benchmark's CloneSet: {e}"))
}

async fn create_sidecarset(client: &Client) -> Result<(), String> {
    let sidecarset: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": APP_LABEL},
        "spec": {
            "selector": {"matchLabels": {"app": APP_LABEL}},
            "containers": [{"name": "sidecar", "image": "busybox:1.36",
                            "command": ["sleep", "infinity"]}],
        },
    }))
    .map_err(|e| format!("the benchmark's SidecarSet: {e}"))?;
    Api::<SidecarSet>::all(client.clone())
        .create(&PostParams::default(), &sidecarset)
        .await
        .map_err(|e| format!("cannot create the SidecarSet: {e}"))?;
    Ok(())
}

/// Polls until every replica runs the update revision and is ready, and
/// no surge pod is left.
async fn converged(clonesets: &Api<CloneSet>, name: &str, replicas: i32) -> Result<(), String> {
    let started = Instant::now();
    let deadline = started + STEP_DEADLINE;
    let mut next_progress = started + PROGRESS_EVERY;
    let mut last = String::from("never read");
    while Instant::now() < deadline {
        match clonesets.get(name).await {
            Ok(cloneset) => {
                let generation = cloneset.metadata.generation;
                if let Some(status) = &cloneset.status {
                    let done = status.observed_generation == generation
                        && status.replicas == replicas
                        && status.ready_replicas == replicas
                        && status.updated_ready_replicas == replicas;
                    if done {
                        return Ok(());
                    }
                    if Instant::now() >= next_progress {
                        next_progress += PROGRESS_EVERY;
                        eprintln!(
                            "  {:>4} s: {} pods, {} ready, {} updated, {} updated and ready",
                            started.elapsed().as_secs(),
                            status.replicas,
                            status.ready_replicas,
                            status.updated_replicas,
                            status.updated_ready_replicas
                        );
                    }
                }
                last = format!("{:?}", cloneset.status);
            }
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!(
        "CloneSet {name} did not converge in {STEP_DEADLINE:?}; last status: {last}"
    ))
}

/// Deletes the CloneSet and its pods (the simulated kubelets finish the
/// deletes), and waits until they are gone.
async fn remove(client: &Client, name: &str) -> Result<(), String> {
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let gone = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    if let Err(error) = clonesets.delete(name, &DeleteParams::default()).await
        && !gone(&error)
    {
        return Err(format!("cannot delete CloneSet {name}: {error}"));
    }
    let own = ListParams::default().labels(&format!("run={name}"));
    pods.delete_collection(&DeleteParams::default(), &own)
        .await
        .map_err(|e| format!("cannot delete CloneSet {name}'s pods: {e}"))?;
    let deadline = Instant::now() + STEP_DEADLINE;
    while Instant::now() < deadline {
        let left = pods
            .list_metadata(&own.clone().limit(1))
            .await
            .map_err(|e| format!("cannot list CloneSet {name}'s pods: {e}"))?;
        if left.items.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Err(format!(
        "CloneSet {name}'s pods were not gone in {STEP_DEADLINE:?}"
    ))
}

/// A manager binary running the controllers against the dev cluster.
struct Manager {
    label: String,
    child: Child,
    probes: SocketAddr,
}

impl Manager {
    async fn start(binary: &Path, kubeconfig: &Path, log: &str) -> Result<Self, String> {
        let port = kruise_devcluster::ports::free_ports(1)
            .map_err(|e| format!("no free port for the manager's probes: {e}"))?[0];
        let probes = SocketAddr::from(([127, 0, 0, 1], port));
        let child = Command::new(binary)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--enable-leader-election=false")
            .arg("--probe-address")
            .arg(probes.to_string())
            .env("RUST_LOG", log)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let mut manager = Self {
            label: binary.display().to_string(),
            child,
            probes,
        };
        let deadline = Instant::now() + Duration::from_mins(1);
        while Instant::now() < deadline {
            if let Ok((200, _)) = http_get(probes, "/readyz").await {
                return Ok(manager);
            }
            if let Ok(Some(status)) = manager.child.try_wait() {
                return Err(format!("{} exited: {status}", manager.label));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        manager.stop();
        Err(format!("{} was not ready within a minute", manager.label))
    }

    async fn metrics(&self) -> Result<String, String> {
        match http_get(self.probes, "/metrics").await? {
            (200, body) => Ok(body),
            (status, body) => Err(format!("the manager's /metrics: {status} {body}")),
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the counters said when a step began.
struct Sample {
    at: Instant,
    cpu_seconds: f64,
    rounds: BTreeMap<String, f64>,
    manager_requests: Counts,
    apiserver_requests: Counts,
    apiserver_bytes: Counts,
}

impl Sample {
    async fn take(client: &Client, manager: &Manager) -> Result<Self, String> {
        let apiserver = apiserver_metrics(client).await?;
        let own = manager.metrics().await?;
        process::reset_peak(manager.child.id())?;
        Ok(Self {
            at: Instant::now(),
            cpu_seconds: process::read(manager.child.id())?.cpu_seconds,
            rounds: counters::rounds(&own),
            manager_requests: counters::read(&own, MANAGER_REQUESTS),
            apiserver_requests: counters::read(&apiserver, APISERVER_REQUESTS),
            apiserver_bytes: counters::read(&apiserver, APISERVER_RESPONSE_BYTES),
        })
    }

    async fn report(
        self,
        step: &'static str,
        client: &Client,
        manager: &Manager,
    ) -> Result<StepReport, String> {
        let wall = self.at.elapsed();
        let usage = process::read(manager.child.id())?;
        let apiserver = apiserver_metrics(client).await?;
        let own = manager.metrics().await?;
        Ok(StepReport {
            manager: manager.label.clone(),
            step,
            wall,
            cpu_seconds: usage.cpu_seconds - self.cpu_seconds,
            peak_rss_bytes: usage.peak_rss_bytes,
            rounds: counters::rounds(&own)
                .into_iter()
                .map(|(controller, after)| {
                    let before = self.rounds.get(&controller).copied().unwrap_or(0.0);
                    (controller, after - before)
                })
                .collect(),
            manager_requests: growth(
                &self.manager_requests,
                &counters::read(&own, MANAGER_REQUESTS),
            ),
            apiserver_requests: growth(
                &self.apiserver_requests,
                &counters::read(&apiserver, APISERVER_REQUESTS),
            ),
            apiserver_bytes: growth(
                &self.apiserver_bytes,
                &counters::read(&apiserver, APISERVER_RESPONSE_BYTES),
            ),
        })
    }
}

async fn apiserver_metrics(client: &Client) -> Result<String, String> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    client
        .request_text(request)
        .await
        .map_err(|e| format!("cannot read the API server's metrics: {e}"))
}

/// A plain HTTP/1.0 GET on loopback: the manager's probe port.
async fn http_get(address: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let failed = |e: std::io::Error| format!("http://{address}{path}: {e}");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(failed)?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .map_err(failed)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.map_err(failed)?;
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("http://{address}{path}: not an HTTP answer"))?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((status, body.to_owned()))
}

fn render(options: &ScaleOptions, sim_nodes: usize, reports: &[StepReport]) -> String {
    let pods = f64::from(options.pods);
    let predownload = options
        .predownload
        .map(|n| format!(", image pre-download on {n} nodes at once"))
        .unwrap_or_default();
    let mut text = format!(
        "A CloneSet of {} pods ({}, maxSurge 10 %, maxUnavailable 10 %{predownload}) and a \
         SidecarSet matching them, on {sim_nodes} simulated nodes.\n\n\
         | manager | step | wall (s) | manager CPU (s) | manager peak RSS (MiB) | CloneSet / SidecarSet rounds | manager requests | \
         manager pod writes per pod | manager pod LISTs | API server requests (all clients) | \
         API server LIST pods (MiB) |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        options.pods, options.strategy
    );
    let pod_lists = |counts: &Counts| {
        counts
            .get(&("LIST".to_owned(), "pods".to_owned()))
            .copied()
            .unwrap_or(0.0)
    };
    for report in reports {
        let _ = writeln!(
            text,
            "| {} | {} | {:.1} | {:.1} | {:.0} | {:.0} / {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} |",
            report.manager,
            report.step,
            report.wall.as_secs_f64(),
            report.cpu_seconds,
            report.peak_rss_bytes / (1024 * 1024),
            round_count(report, kruise_cloneset_controller::CONTROLLER_NAME),
            round_count(report, kruise_sidecarset_controller::CONTROLLER_NAME),
            report.manager_requests.values().sum::<f64>(),
            writes(&pod_requests(&report.manager_requests)) / pods,
            pod_lists(&report.manager_requests),
            report.apiserver_requests.values().sum::<f64>(),
            mebibytes(pod_lists(&report.apiserver_bytes)),
        );
    }
    for report in reports {
        let _ = write!(
            text,
            "\n{}, {}: requests by verb and resource (watches left out: each is one \
             long request)\n\n\
             | verb | resource | manager | API server (all clients) | API server answered (MiB) |\n\
             | --- | --- | ---: | ---: | ---: |\n",
            report.manager, report.step
        );
        let mut keys: Vec<_> = report.apiserver_requests.keys().collect();
        keys.extend(report.manager_requests.keys());
        keys.sort();
        keys.dedup();
        for key in keys.into_iter().filter(|(verb, _)| verb != "WATCH") {
            let count = |counts: &Counts| counts.get(key).copied().unwrap_or(0.0);
            let _ = writeln!(
                text,
                "| {} | {} | {:.0} | {:.0} | {:.1} |",
                key.0,
                key.1,
                count(&report.manager_requests),
                count(&report.apiserver_requests),
                mebibytes(count(&report.apiserver_bytes)),
            );
        }
    }
    text
}

fn round_count(report: &StepReport, controller: &str) -> f64 {
    report.rounds.get(controller).copied().unwrap_or(0.0)
}

/// The requests on pods and their subresources (`pods/status`, ...).
fn pod_requests(counts: &Counts) -> Counts {
    counts
        .iter()
        .filter(|((_, resource), _)| resource == "pods" || resource.starts_with("pods/"))
        .map(|(key, value)| (key.clone(), *value))
        .collect()
}

fn mebibytes(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}
