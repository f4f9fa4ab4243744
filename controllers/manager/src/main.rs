//! `kruise-manager`: kruise-wasm's controllers, and `kruise-manager dev`,
//! the local dev cluster with the webhook host and the controllers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kruise_manager::controllers::{Controllers, ImagePullOptions};
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kruise_manager::probes;
use kruise_node_agent::cri::CriRuntime;
use kube::config::{KubeConfigOptions, Kubeconfig};

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
        /// Where `/healthz` and `/metrics` are served.
        #[arg(long, default_value = "0.0.0.0:8080")]
        probe_address: SocketAddr,
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
        } => run(kubeconfig, probe_address).await,
        Command::NodeAgent {
            node_name,
            runtime_endpoint,
            kubeconfig,
            probe_address,
        } => node_agent(node_name, runtime_endpoint, kubeconfig, probe_address).await,
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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("kruise-manager: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn dev(options: DevOptions) -> Result<(), String> {
    let environment = DevEnvironment::start(options).await?;
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
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| format!("cannot wait for Ctrl-C: {e}"))?;
    eprintln!("stopping");
    environment.shutdown().await;
    Ok(())
}

async fn run(kubeconfig: Option<PathBuf>, probe_address: SocketAddr) -> Result<(), String> {
    let client = client(kubeconfig).await?;
    let (probes, _serving) = probes::serve(probe_address).await?;
    let mut controllers = Controllers::start(&client, ImagePullOptions::default());
    eprintln!("controllers running (http://{probes}/metrics); Ctrl-C stops them");
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| format!("cannot wait for Ctrl-C: {e}"))?;
    controllers.stop();
    Ok(())
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
        "node agent for {node} on {} ({}); Ctrl-C stops it",
        runtime.endpoint().display(),
        runtime.runtime_name()
    );
    tokio::select! {
        () = kruise_node_agent::run(client, node, runtime) => Ok(()),
        signal = tokio::signal::ctrl_c() => signal.map_err(|e| format!("cannot wait for Ctrl-C: {e}")),
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
    kube::Client::try_from(config).map_err(|e| e.to_string())
}
