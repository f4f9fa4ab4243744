//! kubelet from the dev cluster's Go module, joined to the dev cluster:
//! cgroupfs, no swap check, containerd's CRI socket, all its dirs in the
//! node's dir, and the flags this sandbox needs (see `REAL-NODE.md`).

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;

use super::{REAL_NODE_LABEL, RealNodeError, write};
use crate::cluster::DevCluster;
use crate::ports::free_ports;
use crate::process::Component;

/// kubelet's hard eviction floor for free node and image disk, in MiB: an
/// absolute figure, since a percentage of a big shared disk (1 % of 252 GB
/// is 2.5 GB) put the node under DiskPressure mid-test.
pub const EVICTION_FLOOR_MIB: u64 = 100;

/// Registration, the first status and the runtime's first answers take a
/// few seconds here; CI machines are shared and slower.
const READY_DEADLINE: Duration = Duration::from_mins(2);

/// Writes kubelet's kubeconfig and config file and starts it.
pub fn start(
    cluster: &DevCluster,
    work_dir: &Path,
    name: &str,
    containerd_socket: &Path,
) -> Result<Component, RealNodeError> {
    let dir = work_dir.join("kubelet");
    let kubeconfig = dir.join("kubeconfig");
    write(&kubeconfig, &kubeconfig_yaml(cluster, name)?)?;
    let ports = free_ports(2)
        .map_err(|e| RealNodeError::Setup(format!("no free ports for kubelet: {e}")))?;
    let [port, healthz] = ports[..] else {
        return Err(RealNodeError::Setup("no free ports for kubelet".to_owned()));
    };
    let config = dir.join("config.yaml");
    write(
        &config,
        &config_yaml(cluster, work_dir, port, healthz, containerd_socket)?,
    )?;
    let path = |p: &Path| p.display().to_string();
    let args = vec![
        format!("--config={}", path(&config)),
        format!("--kubeconfig={}", path(&kubeconfig)),
        format!("--root-dir={}", path(&dir.join("root"))),
        format!("--cert-dir={}", path(&dir.join("pki"))),
        format!("--hostname-override={name}"),
        format!("--node-labels={REAL_NODE_LABEL}=true"),
        "--v=2".to_owned(),
    ];
    Component::spawn(
        "kubelet",
        &cluster.binaries.path("kubelet"),
        &args,
        work_dir,
    )
    .map_err(|e| RealNodeError::Component(format!("cannot start kubelet: {e}")))
}

/// kubelet talks to the API as `system:node:<name>` in `system:nodes`
/// (a client certificate signed by the cluster's CA), so the Node
/// authorizer limits it to its own Node, pods and their secrets and
/// config maps, as in a real cluster.
fn kubeconfig_yaml(cluster: &DevCluster, name: &str) -> Result<String, RealNodeError> {
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let identity = cluster
        .pki
        .issue_client(&format!("system:node:{name}"), "system:nodes")
        .map_err(|e| RealNodeError::Setup(format!("kubelet's client certificate: {e}")))?;
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": {"server": cluster.server, "certificate-authority-data": encode(&cluster.pki.ca_pem)}}],
        "users": [{"name": "kubelet", "user": {
            "client-certificate-data": encode(&identity.cert_pem),
            "client-key-data": encode(&identity.key_pem),
        }}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": "kubelet"}}],
        "current-context": "devcluster",
    });
    serde_yaml::to_string(&config)
        .map_err(|e| RealNodeError::Setup(format!("kubelet's kubeconfig: {e}")))
}

fn config_yaml(
    cluster: &DevCluster,
    work_dir: &Path,
    port: u16,
    healthz: u16,
    containerd_socket: &Path,
) -> Result<String, RealNodeError> {
    let config = json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": false},
            "x509": {"clientCAFile": cluster.pki.ca_file.display().to_string()},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": format!("unix://{}", containerd_socket.display()),
        "podLogsDir": work_dir.join("pod-logs").display().to_string(),
        "volumePluginDir": work_dir.join("kubelet").join("volume-plugins").display().to_string(),
        "cgroupDriver": "cgroupfs",
        // Findings for this sandbox: REAL-NODE.md.
        "failSwapOn": false,
        "failCgroupV1": false,
        "cgroupsPerQOS": false,
        "enforceNodeAllocatable": [],
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": format!("{EVICTION_FLOOR_MIB}Mi"),
            "nodefs.inodesFree": "1%",
            "imagefs.available": format!("{EVICTION_FLOOR_MIB}Mi"),
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": false,
        "registerNode": true,
        "resolvConf": "/etc/resolv.conf",
    });
    serde_yaml::to_string(&config)
        .map_err(|e| RealNodeError::Setup(format!("kubelet's config: {e}")))
}

/// Polls the Node until its Ready condition is True; `watch` fails early
/// when a process died.
pub async fn wait_ready(
    cluster: &DevCluster,
    name: &str,
    work_dir: &Path,
    mut watch: impl FnMut() -> Result<(), RealNodeError>,
) -> Result<(), RealNodeError> {
    let nodes: Api<Node> = Api::all(cluster.client());
    let started = Instant::now();
    let mut last = String::from("not registered yet");
    while started.elapsed() < READY_DEADLINE {
        watch()?;
        match nodes.get_opt(name).await {
            Ok(Some(node)) => {
                let ready = node
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "Ready");
                match ready {
                    Some(c) if c.status == "True" => return Ok(()),
                    Some(c) => {
                        last = format!(
                            "Ready={} ({}: {})",
                            c.status,
                            c.reason.unwrap_or_default(),
                            c.message.unwrap_or_default()
                        );
                    }
                    None => "registered, no Ready condition yet".clone_into(&mut last),
                }
            }
            Ok(None) => {}
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(RealNodeError::NotReady {
        node: name.to_owned(),
        seconds: READY_DEADLINE.as_secs(),
        last,
        logs: work_dir.display().to_string(),
    })
}
