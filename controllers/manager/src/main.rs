//! `kruise-manager`: kruise-wasm's controllers, and `kruise-manager dev`,
//! the local dev cluster with the webhook host and the controllers (left
//! out of a build without the default feature `dev`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use k8s_openapi::jiff::SignedDuration;
use kruise_controller_runtime::leader::{LeaderElection, Timing};
use kruise_controller_runtime::random::random_u64;
use kruise_manager::controllers::{Controllers, ImagePullOptions};
#[cfg(feature = "dev")]
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kruise_manager::{probes, webhook_certs};
use kruise_node_agent::cri::CriRuntime;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::signal::unix::{SignalKind, signal};

/// mimalloc rather than glibc's malloc: the controllers clone and drop
/// many small objects (pods from the watch caches, their strings and
/// maps) from several threads, and glibc's malloc and free were ~30 % of
/// the manager's CPU in a 2,000-pod rollout (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "kruise-manager", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controllers against a cluster: the kubeconfig given, else
    /// $KUBECONFIG / ~/.kube/config, else the pod's service account.
    Run {
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Where `/healthz`, `/readyz` and `/metrics` are served.
        #[arg(long, default_value = "0.0.0.0:8080")]
        probe_address: SocketAddr,
        #[command(flatten)]
        election: ElectionFlags,
        #[command(flatten)]
        webhook: WebhookFlags,
    },
    /// Run the node agent of one node (a DaemonSet in a real cluster):
    /// recreates containers for ContainerRecreateRequests through the
    /// node's CRI socket.
    NodeAgent {
        /// The node this agent serves (a DaemonSet passes spec.nodeName).
        #[arg(long, env = "NODE_NAME")]
        node_name: String,
        /// The CRI socket; by default the usual containerd, CRI-O and
        /// cri-dockerd paths are tried in turn.
        #[arg(long)]
        runtime_endpoint: Option<PathBuf>,
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Where `/healthz` and `/metrics` are served (kruise-daemon's
        /// health port).
        #[arg(long, default_value = "0.0.0.0:10221")]
        probe_address: SocketAddr,
    },
    /// Start the dev cluster (real kube-apiserver, etcd, controller-manager
    /// and scheduler), our CRDs, simulated nodes, the webhook host and the
    /// controllers; print how to use kubectl; stop everything on Ctrl-C.
    #[cfg(feature = "dev")]
    Dev {
        /// How many simulated nodes to register.
        #[arg(long, default_value_t = 3)]
        sim_nodes: usize,
        /// Keep keys, logs and the kubeconfig in this directory.
        #[arg(long)]
        work_dir: Option<PathBuf>,
        /// Also join a real node: kubelet on containerd from Debian's
        /// packages (pods on it need hostNetwork: true).
        #[arg(long)]
        real_node: bool,
    },
    /// Measure the controllers at scale on the dev cluster: a CloneSet of
    /// `--pods` pods and a SidecarSet matching them, scaled up then rolled
    /// out, by each `--manager` binary in turn (default: this one); prints
    /// a Markdown report (docs/benchmarks.md).
    #[cfg(feature = "dev")]
    ScaleBench {
        #[arg(long, default_value_t = 2000)]
        pods: u32,
        /// ReCreate or InPlaceIfPossible.
        #[arg(long, default_value = "ReCreate")]
        strategy: String,
        /// A manager binary to run; repeat to compare several.
        #[arg(long)]
        manager: Vec<PathBuf>,
        /// The managers' RUST_LOG (their logs go to stderr).
        #[arg(long, default_value = "warn")]
        manager_log: String,
        /// Pre-download the new image during an in-place rollout, on this
        /// many nodes at once (the CloneSet's
        /// `apps.kruise.io/image-predownload-parallelism`).
        #[arg(long)]
        predownload: Option<u32>,
    },
    /// Print the generated part of the install (artifacts/deploy/generated.yaml):
    /// the webhook configurations, the host's policies and its read access.
    #[cfg(feature = "dev")]
    DeployManifests,
    /// Build the images artifacts/deploy runs, reproducibly (Debian's umoci
    /// and skopeo): the manager's (also the node agent's) and the webhook
    /// host's. For a cluster, give release builds:
    /// `cargo build --release -p kruise-manager --no-default-features` and
    /// `cargo build --release -p kruise-wasm-host --bin kruise-wasm`.
    #[cfg(feature = "dev")]
    BuildImages {
        /// The kruise-manager binary to pack.
        #[arg(long)]
        manager_binary: PathBuf,
        /// The kruise-wasm binary to pack.
        #[arg(long)]
        host_binary: PathBuf,
        /// Where the root filesystems and the OCI layout (`<dir>/oci`,
        /// tags `manager` and `host`) are written.
        #[arg(long)]
        out: PathBuf,
        /// Also push them, as `<registry>/kruise-wasm/{manager,host}:<tag>`
        /// (a plain-HTTP registry such as the dev environment's).
        #[arg(long)]
        push: Option<String>,
        #[arg(long, default_value = "v0.1.0")]
        tag: String,
    },
}

/// Leader election, with OpenKruise's flags: of several replicas one runs
/// the controllers, the others stand by.
#[derive(Debug, clap::Args)]
struct ElectionFlags {
    /// `--enable-leader-election=false` runs the controllers at once (a
    /// single replica only).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_leader_election: bool,
    #[arg(long, default_value = "kruise-system")]
    leader_election_namespace: String,
    /// The Lease's name.
    #[arg(long, default_value = "kruise-wasm-manager")]
    leader_election_id: String,
    /// How long a Lease protects its holder (a duration: 15s, 1m, 500ms).
    #[arg(long, default_value = "15s", value_parser = duration)]
    leader_election_lease_duration: Duration,
    /// How long a leader keeps trying to renew before it gives up.
    #[arg(long, default_value = "10s", value_parser = duration)]
    leader_election_renew_deadline: Duration,
    /// How often the Lease is tried.
    #[arg(long, default_value = "2s", value_parser = duration)]
    leader_election_retry_period: Duration,
}

/// The webhook host's certificates, which the leading manager issues,
/// renews and makes the webhook configurations trust.
#[derive(Debug, clap::Args)]
#[allow(clippy::struct_field_names)] // clap names the flags after them
struct WebhookFlags {
    /// The webhook host's Service: given, the manager keeps a certificate
    /// for it in the Secret below (artifacts/deploy passes it).
    #[arg(long)]
    webhook_service: Option<String>,
    /// The namespace of that Service and Secret.
    #[arg(long, default_value = "kruise-system")]
    webhook_namespace: String,
    #[arg(long, default_value = webhook_certs::SECRET)]
    webhook_secret: String,
}

impl WebhookFlags {
    fn target(&self) -> Option<webhook_certs::Target> {
        Some(webhook_certs::Target {
            namespace: self.webhook_namespace.clone(),
            service: self.webhook_service.clone()?,
            secret: self.webhook_secret.clone(),
        })
    }
}

/// A duration as Go's flags and Kubernetes write them ("15s", "1m30s").
fn duration(text: &str) -> Result<Duration, String> {
    let signed: SignedDuration = text.parse().map_err(|e| format!("{e}"))?;
    Duration::try_from(signed).map_err(|_| format!("{text}: a duration cannot be negative"))
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run {
            kubeconfig,
            probe_address,
            election,
            webhook,
        } => run(kubeconfig, probe_address, election, webhook.target()).await,
        Command::NodeAgent {
            node_name,
            runtime_endpoint,
            kubeconfig,
            probe_address,
        } => node_agent(node_name, runtime_endpoint, kubeconfig, probe_address).await,
        #[cfg(feature = "dev")]
        Command::Dev {
            sim_nodes,
            work_dir,
            real_node,
        } => {
            dev(DevOptions {
                sim_nodes,
                work_dir,
                run_controllers: true,
                real_node,
            })
            .await
        }
        #[cfg(feature = "dev")]
        Command::BuildImages {
            manager_binary,
            host_binary,
            out,
            push,
            tag,
        } => build_images(&manager_binary, &host_binary, &out, push.as_deref(), &tag).await,
        #[cfg(feature = "dev")]
        Command::ScaleBench {
            pods,
            strategy,
            manager,
            manager_log,
            predownload,
        } => {
            let options = kruise_manager::scale_bench::ScaleOptions {
                pods,
                strategy,
                managers: manager,
                manager_log,
                predownload,
            };
            scale_bench(options).await
        }
        #[cfg(feature = "dev")]
        Command::DeployManifests => {
            kruise_manager::deploy::manifests().map(|text| print!("{text}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("kruise-manager: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "dev")]
async fn dev(options: DevOptions) -> Result<(), String> {
    let mut environment = DevEnvironment::start(options).await?;
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let (probes, _serving) = probes::serve(loopback).await?;
    let kubeconfig = environment.kubeconfig().display().to_string();
    println!(
        "The dev cluster is up: {} with {} simulated nodes; the pod webhook is served by our host at {}.\n\n\
         Use it from another shell:\n\n  export KUBECONFIG={kubeconfig}\n  kubectl get nodes\n  \
         kubectl apply -f ../shared/examples/sidecarset-scs-demo.yaml\n  kubectl apply -f ../shared/examples/pod-test-pod.yaml\n  \
         kubectl get pod test-pod -o yaml\n\nThe controllers' metrics: http://{probes}/metrics\n\nPress Ctrl-C to stop everything.",
        environment.cluster.server,
        environment.nodes.names.len(),
        environment.webhook_url,
    );
    let outcome = tokio::select! {
        signal = shutdown_signal() => signal.map(|name| eprintln!("{name}: stopping")),
        ended = environment.controller_ended() => Err(format!("{ended}; stopping everything")),
    };
    environment.shutdown().await;
    outcome
}

#[cfg(feature = "dev")]
async fn scale_bench(mut options: kruise_manager::scale_bench::ScaleOptions) -> Result<(), String> {
    if options.managers.is_empty() {
        let this = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
        options.managers.push(this);
    }
    let report = kruise_manager::scale_bench::run(&options).await?;
    println!("{report}");
    Ok(())
}

#[cfg(feature = "dev")]
async fn build_images(
    manager_binary: &std::path::Path,
    host_binary: &std::path::Path,
    out: &std::path::Path,
    push: Option<&str>,
    tag: &str,
) -> Result<(), String> {
    use kruise_manager::images;
    let manager = images::manager_image(out, manager_binary).await?;
    let host = images::host_image(out, host_binary).await?;
    println!(
        "manager {manager}
host {host}
(in {})",
        images::layout(out).display()
    );
    if let Some(registry) = push {
        for reference in images::push(out, registry, tag).await? {
            println!("pushed {reference}");
        }
    }
    Ok(())
}

async fn run(
    kubeconfig: Option<PathBuf>,
    probe_address: SocketAddr,
    election: ElectionFlags,
    certificates: Option<webhook_certs::Target>,
) -> Result<(), String> {
    let client = client(kubeconfig).await?;
    let mut election = leader_election(&client, &election)?;
    let (probes, _serving) = probes::serve(probe_address).await?;
    eprintln!("probes at http://{probes}/healthz, /readyz and /metrics");
    if let Some(election) = election.as_mut() {
        eprintln!("waiting to lead as {}", election.identity());
        tokio::select! {
            () = election.acquire() => {}
            signal = shutdown_signal() => return signal.map(|name| eprintln!("{name}: stopping")),
        }
    }
    let mut controllers = Controllers::start(&client, ImagePullOptions::default());
    eprintln!("controllers running; SIGTERM or Ctrl-C stops them");
    let keep_leading = async {
        match election.as_mut() {
            Some(election) => election.keep().await,
            None => std::future::pending().await,
        }
    };
    let certificates = async {
        match certificates {
            Some(target) => webhook_certs::keep_current(client.clone(), target).await,
            None => std::future::pending().await,
        }
    };
    // Leadership lost or a controller gone: exit, for Kubernetes to
    // restart the process (a standby has taken over meanwhile).
    let outcome = tokio::select! {
        signal = shutdown_signal() => signal.map(|name| eprintln!("{name}: stopping")),
        lost = keep_leading => Err(format!("leadership lost: {lost}")),
        ended = controllers.ended() => Err(format!("{ended}; exiting")),
        () = certificates => Err("the webhook certificates' renewal ended; exiting".to_owned()),
    };
    controllers.stop();
    if let (Ok(()), Some(election)) = (&outcome, election.as_mut()) {
        election.release().await;
    }
    outcome
}

fn leader_election(
    client: &kube::Client,
    flags: &ElectionFlags,
) -> Result<Option<LeaderElection>, String> {
    if !flags.enable_leader_election {
        return Ok(None);
    }
    let timing = Timing {
        lease_duration: flags.leader_election_lease_duration,
        renew_deadline: flags.leader_election_renew_deadline,
        retry_period: flags.leader_election_retry_period,
    };
    timing
        .check()
        .map_err(|e| format!("leader election: {e}"))?;
    Ok(Some(LeaderElection::new(
        client.clone(),
        &flags.leader_election_namespace,
        &flags.leader_election_id,
        identity(),
        timing,
    )))
}

/// This replica's name in the Lease: the pod's (its hostname) and a random
/// part, so a restarted pod of the same name is a new holder.
fn identity() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "kruise-manager".to_owned());
    format!("{host}_{:016x}", random_u64())
}

/// Waits for SIGTERM (Kubernetes stopping the pod) or Ctrl-C; says which.
async fn shutdown_signal() -> Result<&'static str, String> {
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot wait for SIGTERM: {e}"))?;
    tokio::select! {
        _ = terminate.recv() => Ok("SIGTERM"),
        interrupt = tokio::signal::ctrl_c() => interrupt
            .map(|()| "Ctrl-C")
            .map_err(|e| format!("cannot wait for Ctrl-C: {e}")),
    }
}

async fn node_agent(
    node: String,
    endpoint: Option<PathBuf>,
    kubeconfig: Option<PathBuf>,
    probe_address: SocketAddr,
) -> Result<(), String> {
    let client = client(kubeconfig).await?;
    let (probes, _serving) = probes::serve(probe_address).await?;
    eprintln!("probes at http://{probes}/healthz and /metrics");
    let runtime = CriRuntime::connect(endpoint.as_deref())
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "node agent for {node} on {} ({}); SIGTERM or Ctrl-C stops it",
        runtime.endpoint().display(),
        runtime.runtime_name()
    );
    tokio::select! {
        () = kruise_node_agent::run(client, node, runtime) => Err("the node agent ended".to_owned()),
        signal = shutdown_signal() => signal.map(|name| eprintln!("{name}: stopping")),
    }
}

/// The kubeconfig given, else $KUBECONFIG / ~/.kube/config, else the pod's
/// service account.
async fn client(kubeconfig: Option<PathBuf>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(&path)
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no cluster configuration found: {e}"))?,
    };
    // Counted: `/metrics` says what the controllers cost the API server.
    kruise_controller_runtime::api_requests::counted_client(config).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_read_as_go_writes_them() {
        assert_eq!(duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(duration("-2s").is_err());
        assert!(duration("soon").is_err());
        assert!(duration("").is_err());
    }

    #[test]
    fn leader_election_is_on_by_default_and_can_be_turned_off() {
        let on = Cli::try_parse_from(["kruise-manager", "run"]).unwrap_or_else(|e| panic!("{e}"));
        let Command::Run { election, .. } = on.command else {
            panic!("not run")
        };
        assert!(election.enable_leader_election);
        assert_eq!(election.leader_election_namespace, "kruise-system");
        let off = Cli::try_parse_from(["kruise-manager", "run", "--enable-leader-election=false"])
            .unwrap_or_else(|e| panic!("{e}"));
        let Command::Run { election, .. } = off.command else {
            panic!("not run")
        };
        assert!(!election.enable_leader_election);
        let bad = Cli::try_parse_from([
            "kruise-manager",
            "run",
            "--leader-election-retry-period=fast",
        ]);
        assert!(bad.is_err());
    }
}
