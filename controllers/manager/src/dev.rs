//! The dev environment: the dev cluster, our CRDs, simulated nodes, the
//! webhook host serving OpenKruise's pod webhook through a real
//! MutatingWebhookConfiguration, and the controllers. The README's run
//! command starts it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kruise_core::launch_priority::BARRIER_ENV;
use kruise_devcluster::realnode::RealNode;
use kruise_devcluster::simnode::SimNodes;
use kruise_devcluster::{DevCluster, Options};
use kruise_policy_modules::{ALL, policies_yml_entry};
use kruise_wasm_host::live_cluster::Credentials;
use kruise_wasm_host::runtime::{Runtime, RuntimeConfig};
use kruise_wasm_host::serve::{self, ClusterSource, ServeFiles};
use kruise_wasm_host::server::{RunningServer, ServerConfig, TlsFiles};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

use crate::agents::NodeAgents;
use crate::controllers::{Controllers, ImagePullOptions};
use crate::deploy;
use crate::webhook::{self, Endpoint};

#[derive(Debug, Clone)]
pub struct DevOptions {
    pub sim_nodes: usize,
    /// Keep keys, logs and the kubeconfig here (default: a temporary
    /// directory removed on stop).
    pub work_dir: Option<PathBuf>,
    /// Run the controllers (tests of one controller start their own, to
    /// stop and restart it).
    pub run_controllers: bool,
    /// Also join a real node: kubelet on containerd (see
    /// controllers/devcluster/REAL-NODE.md); its pods need hostNetwork.
    pub real_node: bool,
}

impl Default for DevOptions {
    fn default() -> Self {
        Self {
            sim_nodes: 3,
            work_dir: None,
            run_controllers: true,
            real_node: false,
        }
    }
}

/// Everything running; dropping it stops it all.
#[derive(Debug)]
pub struct DevEnvironment {
    pub webhook_url: String,
    /// The policies.yml the webhook host serves (policy-server's format).
    pub policies_file: PathBuf,
    pub nodes: SimNodes,
    /// One node agent per node (stop and start them again to test a
    /// restart mid-way).
    pub agents: NodeAgents,
    pub real_node: Option<RealNode>,
    webhook: Option<RunningServer>,
    controllers: Controllers,
    /// The wasm runtime the host's policies run on (its epoch ticker
    /// enforces their deadlines).
    _runtime: Runtime,
    pub cluster: DevCluster,
}

impl DevEnvironment {
    pub async fn start(options: DevOptions) -> Result<Self, String> {
        let cluster = DevCluster::start(Options {
            work_dir: options.work_dir.clone(),
        })
        .await
        .map_err(|e| e.to_string())?;
        let client = cluster.client();
        // The CRDs name the host's address before it starts: its watches
        // need the CRDs. Objects a previous run stored (in v1beta1) cannot
        // be listed until it serves the conversion, so it fills its caches
        // after it starts serving (host/src/live_cluster.rs).
        let port = kruise_devcluster::ports::free_ports(1)
            .map_err(|e| format!("no free port for the webhook host: {e}"))?[0];
        let conversion = cluster.conversion_webhook(([127, 0, 0, 1], port).into());
        kruise_devcluster::crds::install(&client, &conversion).await?;
        let nodes = SimNodes::start(client.clone(), options.sim_nodes)
            .await
            .map_err(|e| format!("cannot register the simulated nodes: {e}"))?;

        let real_node = if options.real_node {
            Some(
                RealNode::start(&cluster)
                    .await
                    .map_err(|e| format!("cannot join the real node: {e}"))?,
            )
        } else {
            None
        };
        let files = write_host_files(&cluster)?;
        let policies_file = files.policies.clone();
        let kubeconfig = cluster.kubeconfig.clone();
        let (runtime, webhook) =
            tokio::task::spawn_blocking(move || start_host(&files, &kubeconfig, port))
                .await
                .map_err(|e| format!("the webhook host did not start: {e}"))??;
        let webhook_url = format!("https://{}", webhook.address);
        let real = real_node
            .as_ref()
            .map(|n| (n.name.as_str(), n.containerd_socket.as_path()));
        let agents = NodeAgents::start(&client, &nodes.names, real).await?;
        // From here on, dropping the environment stops everything.
        let environment = Self {
            webhook_url,
            policies_file,
            nodes,
            agents,
            real_node,
            webhook: Some(webhook),
            controllers: if options.run_controllers {
                // NodeImages at once: simulated nodes' labels are final.
                Controllers::start(
                    &client,
                    ImagePullOptions {
                        creation_delay: std::time::Duration::ZERO,
                        ..ImagePullOptions::default()
                    },
                )
            } else {
                Controllers::none()
            },
            _runtime: runtime,
            cluster,
        };
        let endpoint = Endpoint::Url {
            base: &environment.webhook_url,
            ca_pem: &environment.cluster.pki.ca_pem,
        };
        for configuration in deploy::webhook_configurations(endpoint) {
            webhook::register(&client, &configuration).await?;
        }
        wait_for_pod_webhook(&client).await?;
        Ok(environment)
    }

    pub fn client(&self) -> Client {
        self.cluster.client()
    }

    /// Waits until one of the controllers ends or panics; says which.
    pub async fn controller_ended(&mut self) -> String {
        self.controllers.ended().await
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.cluster.kubeconfig
    }

    /// Stops the real node (kubelet, containers, containerd, registry),
    /// then everything else.
    pub async fn shutdown(mut self) {
        self.agents.stop();
        if let Some(mut node) = self.real_node.take() {
            for leftover in node.stop().await {
                tracing::warn!(%leftover, "real node teardown");
            }
        }
        self.stop();
    }

    /// Stops the host, the simulated nodes and the control plane (a real
    /// node still running is stopped when dropped).
    pub fn stop(&mut self) {
        self.agents.stop();
        self.controllers.stop();
        if let Some(webhook) = self.webhook.take() {
            webhook.shutdown();
        }
        self.nodes.stop();
        self.cluster.stop();
    }
}

impl Drop for DevEnvironment {
    fn drop(&mut self) {
        self.stop();
    }
}

struct HostFiles {
    policies: PathBuf,
    chains: PathBuf,
    tls: TlsFiles,
}

/// The modules, policies.yml, chains file and serving certificate of the
/// webhook host, in `<work dir>/webhook`.
fn write_host_files(cluster: &DevCluster) -> Result<HostFiles, String> {
    let dir = cluster.work_dir.join("webhook");
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes)
            .map(|()| path.clone())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut policies = serde_json::Map::new();
    for module in ALL {
        let path = write(&format!("{}.wasm", module.name), module.wasm)?;
        policies.insert(module.name.to_owned(), policies_yml_entry(module, &path)?);
    }
    let chains = deploy::chains();
    let yaml = |value: &serde_json::Value| serde_yaml::to_string(value).unwrap_or_default();
    let (cert, key) = cluster.write_serving_files("webhook")?;
    Ok(HostFiles {
        policies: write("policies.yml", yaml(&policies.into()).as_bytes())?,
        chains: write("chains.yml", yaml(&chains).as_bytes())?,
        tls: TlsFiles { cert, key },
    })
}

fn start_host(
    files: &HostFiles,
    kubeconfig: &Path,
    port: u16,
) -> Result<(Runtime, RunningServer), String> {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: compile_cache(),
        ..RuntimeConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let config = ServerConfig {
        address: [127, 0, 0, 1].into(),
        port,
        readiness_port: 0,
        tls: Some(files.tls.clone()),
        ..ServerConfig::default()
    };
    let to_serve = ServeFiles {
        policies: &files.policies,
        chains: Some(&files.chains),
        always_accept_namespace: None,
    };
    let cluster = ClusterSource::Live(Credentials::Kubeconfig(kubeconfig));
    let (server, _) = serve::start(
        &runtime,
        to_serve,
        cluster,
        Some(Duration::from_secs(2)),
        &config,
        None,
    )?;
    Ok((runtime, server))
}

/// The host's compiled-module cache, shared with the `kruise-wasm` CLI.
pub fn compile_cache() -> Option<PathBuf> {
    std::env::var_os("KRUISE_WASM_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/kruise-wasm"))
        })
        .filter(|dir| dir.is_absolute())
}

/// The API server loads webhook configurations asynchronously: dry-run a
/// pod that the launch-priority policy changes until it comes back changed.
async fn wait_for_pod_webhook(client: &Client) -> Result<(), String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let probe: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "webhook-probe",
            "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"},
        },
        "spec": {"containers": [
            {"name": "a", "image": "busybox"},
            {"name": "b", "image": "busybox"},
        ]},
    }))
    .map_err(|e| e.to_string())?;
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < Duration::from_secs(30) {
        match pods.create(&params, &probe).await {
            Ok(pod) if mutated(&pod) => return Ok(()),
            Ok(_) => "the pod came back unchanged".clone_into(&mut last),
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("the pod webhook never took effect: {last}"))
}

fn mutated(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|spec| {
        spec.containers
            .iter()
            .any(|c| c.env.iter().flatten().any(|e| e.name == BARRIER_ENV))
    })
}
