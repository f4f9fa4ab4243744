//! containerd from Debian (1.6) with everything in the node's dir: root,
//! state, sockets, runc's state, the CNI config and the registry hosts.
//! `restrict_oom_score_adj = true` is required here: this sandbox lacks
//! CAP_SYS_RESOURCE, and without it every RunPodSandbox fails with runc's
//! "can't get final child's PID from pipe: EOF".

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{CNI_BIN_DIR, RealNodeError, run, write};
use crate::process::{Component, log_tail};

const READY_DEADLINE: Duration = Duration::from_secs(30);

/// containerd's gRPC (and CRI) socket for a node dir.
pub fn socket(work_dir: &Path) -> PathBuf {
    work_dir.join("containerd").join("containerd.sock")
}

fn config(work_dir: &Path, registry: &str, sandbox_image: &str) -> String {
    let base = work_dir.join("containerd");
    let path = |name: &str| base.join(name).display().to_string();
    let socket = socket(work_dir).display().to_string();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs}"
"#,
        root = path("root"),
        state = path("state"),
        opt = path("opt"),
        runc = path("runc"),
        cni = path("cni"),
        certs = path("certs.d"),
    ) + &format!("# the local registry: {registry}\n")
}

/// Writes the configs and starts containerd; ready when `ctr version`
/// answers on its socket.
pub async fn start(
    work_dir: &Path,
    registry: &str,
    sandbox_image: &str,
) -> Result<Component, RealNodeError> {
    let base = work_dir.join("containerd");
    let config_file = base.join("config.toml");
    write(&config_file, &config(work_dir, registry, sandbox_image))?;
    write(
        &base.join("cni").join("10-loopback.conflist"),
        r#"{"cniVersion": "1.0.0", "name": "loopback", "plugins": [{"type": "loopback"}]}"#,
    )?;
    write(
        &base.join("certs.d").join(registry).join("hosts.toml"),
        &format!(
            "server = \"http://{registry}\"\n\n[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n"
        ),
    )?;
    let program = super::find_on_path("containerd").ok_or_else(|| RealNodeError::Missing {
        missing: "`containerd` (Debian package containerd)".to_owned(),
    })?;
    let mut containerd = Component::spawn(
        "containerd",
        &program,
        &["--config".to_owned(), config_file.display().to_string()],
        work_dir,
    )
    .map_err(|e| RealNodeError::ContainerdUnavailable(format!("cannot run containerd: {e}")))?;
    let socket = socket(work_dir);
    let address = socket.display().to_string();
    let started = Instant::now();
    let mut last = String::from("not asked yet");
    loop {
        if let Some(message) = containerd.exited() {
            return Err(RealNodeError::ContainerdUnavailable(message));
        }
        if socket.exists() {
            match run("ctr", &["--address", &address, "version"]).await {
                Ok(_) => return Ok(containerd),
                Err(error) => last = error,
            }
        }
        if started.elapsed() > READY_DEADLINE {
            return Err(RealNodeError::ContainerdUnavailable(format!(
                "containerd did not answer on {address} within {} s ({last}); the end of {}:\n{}",
                READY_DEADLINE.as_secs(),
                containerd.log.display(),
                log_tail(&containerd.log)
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Kills and deletes every task and container in every namespace, so the
/// shims exit. Best effort: what fails shows in [`super::leftovers`].
pub async fn remove_all_containers(socket: &Path) {
    let address = socket.display().to_string();
    let namespaces = match ctr(&address, vec!["namespaces", "ls", "-q"]).await {
        Ok(out) => out,
        Err(error) => {
            tracing::warn!(%error, "cannot list containerd's namespaces");
            return;
        }
    };
    for namespace in namespaces.lines().filter(|n| !n.is_empty()) {
        let tasks = list(&address, namespace, "tasks").await;
        for task in &tasks {
            let _ = ctr(
                &address,
                vec![
                    "-n",
                    namespace,
                    "tasks",
                    "kill",
                    "-s",
                    "SIGKILL",
                    task.as_str(),
                ],
            )
            .await;
        }
        // The CRI plugin deletes the tasks that exit; delete the rest.
        let started = Instant::now();
        let mut tasks = list(&address, namespace, "tasks").await;
        while !tasks.is_empty() && started.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            tasks = list(&address, namespace, "tasks").await;
        }
        for task in &tasks {
            if let Err(error) = ctr(
                &address,
                vec!["-n", namespace, "tasks", "delete", "-f", task.as_str()],
            )
            .await
            {
                tracing::warn!(%error, task, "cannot delete a task");
            }
        }
        for container in list(&address, namespace, "containers").await {
            if let Err(error) = ctr(
                &address,
                vec!["-n", namespace, "containers", "rm", container.as_str()],
            )
            .await
            {
                tracing::warn!(%error, container, "cannot remove a container");
            }
        }
    }
}

/// The ids of a namespace's `tasks` or `containers`.
async fn list(address: &str, namespace: &str, what: &str) -> Vec<String> {
    ctr(address, vec!["-n", namespace, what, "ls", "-q"])
        .await
        .unwrap_or_default()
        .lines()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

async fn ctr(address: &str, args: Vec<&str>) -> Result<String, String> {
    let mut full = vec!["--address", address];
    full.extend(args);
    run("ctr", &full).await
}
