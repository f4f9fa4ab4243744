//! A real node beside the simulated ones: containerd and runc from
//! Debian's packages, a local OCI registry on loopback with test images
//! this module builds itself (busybox-static rootfs), and kubelet built from
//! the same `k8s.io/kubernetes` module as the control plane, joined to a
//! [`DevCluster`].
//!
//! Pods on this node must use `hostNetwork: true`: there is no pod network
//! here (a loopback-only CNI config only makes the runtime report its
//! network ready). What this sandbox needs from containerd and kubelet is
//! written down in `REAL-NODE.md` beside this crate's `Cargo.toml`.
//!
//! containerd 1.6 also writes under `/run/containerd` whatever its config
//! says, so run one real node per machine at a time.
//!
//! [`RealNode::stop`] (or dropping it) stops kubelet first and deletes the
//! Node object, then removes every pod's containers, then stops containerd
//! and the registry, and unmounts whatever is left under the node's
//! directory: no shim, mount or process stays behind ([`leftovers`] lists
//! any that did).

mod containerd;
mod images;
mod kubelet;
mod registry;
mod teardown;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::cluster::DevCluster;
use crate::oci::run;
use crate::process::Component;

pub use images::TestImages;
pub use teardown::leftovers;

/// The label every real node carries (`"true"`), for node selectors.
pub const REAL_NODE_LABEL: &str = "devcluster.kruise.io/real-node";

/// A pod for the real node `node`: on the host network (no pod network is
/// allowed here), pinned to the node, every taint tolerated, 5 s to stop;
/// `spec`'s fields (containers, volumes, ...) are added to that.
pub fn pod_on(
    node: &str,
    metadata: serde_json::Value,
    spec: serde_json::Value,
) -> Result<k8s_openapi::api::core::v1::Pod, serde_json::Error> {
    let mut pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "spec": {
            "hostNetwork": true,
            "nodeName": node,
            "nodeSelector": {REAL_NODE_LABEL: "true"},
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 5,
        },
    });
    pod["metadata"] = metadata;
    if let serde_json::Value::Object(fields) = spec {
        for (key, value) in fields {
            pod["spec"][key] = value;
        }
    }
    serde_json::from_value(pod)
}

/// The executables the real node runs, with the Debian package of each.
pub const REQUIRED_TOOLS: [(&str, &str); 7] = [
    ("containerd", "containerd"),
    ("containerd-shim-runc-v2", "containerd"),
    ("ctr", "containerd"),
    ("runc", "runc"),
    ("docker-registry", "docker-registry"),
    ("skopeo", "skopeo"),
    ("umoci", "umoci"),
];

/// The static busybox the test images are made of (Debian `busybox-static`).
pub const BUSYBOX: &str = "/bin/busybox";

/// The loopback CNI plugin containerd runs for the NetworkReady condition
/// (Debian `containernetworking-plugins`, a dependency of `containerd`).
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

#[derive(Debug, thiserror::Error)]
pub enum RealNodeError {
    /// Something the real node needs is not installed.
    #[error(
        "the real node needs {missing}; install with: apt-get install -y containerd runc docker-registry skopeo umoci busybox-static apache2-utils"
    )]
    Missing { missing: String },
    /// containerd is installed but does not run on this machine.
    #[error("containerd cannot start on this machine: {0}")]
    ContainerdUnavailable(String),
    #[error("real node set-up: {0}")]
    Setup(String),
    #[error("building the test images: {0}")]
    Images(String),
    #[error("{0}")]
    Component(String),
    /// Too little free disk where the node keeps its images and pods.
    #[error(
        "only {free_mib} MiB free on the disk of {dir}, where the real node keeps its images, containers and pods; it needs at least {needed_mib} MiB (kubelet reports DiskPressure and evicts pods below {floor} MiB): free some disk first",
        floor = kubelet::EVICTION_FLOOR_MIB
    )]
    LowDisk {
        dir: String,
        free_mib: u64,
        needed_mib: u64,
    },
    #[error("the node {node} was not Ready within {seconds} s; last: {last}; logs in {logs}")]
    NotReady {
        node: String,
        seconds: u64,
        last: String,
        logs: String,
    },
}

impl RealNodeError {
    /// True when this machine cannot host a real node at all (a tool is
    /// missing or containerd does not run): tests skip on this, saying why.
    pub fn is_unsupported_machine(&self) -> bool {
        matches!(self, Self::Missing { .. } | Self::ContainerdUnavailable(_))
    }
}

/// Set (to anything) where the machine is known to run containerd, as CI
/// does: a real node that cannot start there fails the test instead of
/// skipping it.
pub const REQUIRE_REAL_NODE: &str = "KRUISE_REQUIRE_REAL_NODE";

fn real_node_required() -> bool {
    std::env::var_os(REQUIRE_REAL_NODE).is_some()
}

/// The registry of [`RealNode::start_auth_registry`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthRegistry {
    /// `127.0.0.1:<port>`.
    pub address: String,
    /// The test image there, pullable with the credentials only.
    pub image: String,
    pub username: String,
    pub password: String,
}

/// A running real node. Stops everything it started when dropped.
pub struct RealNode {
    /// The Node's name (`real-node-<pid>`).
    pub name: String,
    /// Everything the node writes: configs, containerd's root and state,
    /// kubelet's root dir, pod logs, the registry's storage, the logs.
    pub work_dir: PathBuf,
    /// The local registry, `127.0.0.1:<port>`.
    pub registry: String,
    /// The images pushed to the local registry.
    pub images: TestImages,
    /// containerd's CRI socket (`unix://` not included).
    pub containerd_socket: PathBuf,
    kubelet: Option<Component>,
    containerd: Option<Component>,
    registry_process: Option<Component>,
    auth_registry: Option<Component>,
    /// containerd's directories outside `work_dir` that did not exist
    /// before: removed on stop once empty.
    runtime_dirs: Vec<PathBuf>,
    client: kube::Client,
    stopped: bool,
}

impl RealNode {
    /// For tests: [`RealNode::start`], or `None` on a machine that cannot
    /// host a real node, after printing `SKIPPED: ` and the exact reason
    /// (CI greps for it). Any other failure fails the test.
    pub async fn start_or_skip(cluster: &DevCluster) -> Option<Self> {
        match Self::start(cluster).await {
            Ok(node) => Some(node),
            Err(error) if error.is_unsupported_machine() && !real_node_required() => {
                println!("SKIPPED: no real node on this machine: {error}");
                eprintln!("SKIPPED: no real node on this machine: {error}");
                None
            }
            Err(error) => panic!("the real node did not start: {error}"),
        }
    }

    /// Starts the registry, pushes the test images, starts containerd and
    /// kubelet, and waits until the Node is Ready in `cluster`.
    pub async fn start(cluster: &DevCluster) -> Result<Self, RealNodeError> {
        check_tools()?;
        let work_dir = fresh_temp_dir();
        std::fs::create_dir_all(&work_dir).map_err(|e| {
            RealNodeError::Setup(format!("cannot create {}: {e}", work_dir.display()))
        })?;
        if let Err(error) = check_free_disk(&work_dir) {
            // Nothing was started yet: only the empty dir to remove.
            let _ = std::fs::remove_dir(&work_dir);
            return Err(error);
        }
        let mut node = Self {
            name: format!("real-node-{}", std::process::id()),
            containerd_socket: containerd::socket(&work_dir),
            work_dir,
            registry: String::new(),
            images: TestImages::default(),
            kubelet: None,
            containerd: None,
            registry_process: None,
            auth_registry: None,
            runtime_dirs: teardown::missing_runtime_dirs(),
            client: cluster.client(),
            stopped: false,
        };
        // On any error the partly started node is dropped: it stops what
        // did start.
        let (process, address) = registry::start(&node.work_dir).await?;
        node.registry_process = Some(process);
        node.registry = address;
        node.images = images::build_and_push(&node.work_dir, &node.registry).await?;
        node.containerd =
            Some(containerd::start(&node.work_dir, &node.registry, &node.images.pause).await?);
        let kubelet = kubelet::start(cluster, &node.work_dir, &node.name, &node.containerd_socket)?;
        node.kubelet = Some(kubelet);
        node.wait_ready(cluster).await?;
        tracing::info!(node = %node.name, dir = %node.work_dir.display(), "real node ready");
        Ok(node)
    }

    /// Starts a second registry that asks for a user name and password
    /// (basic auth, an `htpasswd` file made with Debian's `apache2-utils`)
    /// and copies the test image `v2` into it, for pulls with credentials.
    /// containerd reaches it as it does the node's registry: plain HTTP on
    /// loopback.
    pub async fn start_auth_registry(&mut self) -> Result<AuthRegistry, RealNodeError> {
        let htpasswd_tool = find_on_path("htpasswd").ok_or_else(|| RealNodeError::Missing {
            missing: "`htpasswd` (Debian package apache2-utils)".to_owned(),
        })?;
        let (username, password) = ("kruise", "pull-secret-of-the-dev-cluster");
        let line = run(
            &htpasswd_tool.display().to_string(),
            &["-Bbn", username, password],
        )
        .await
        .map_err(RealNodeError::Setup)?;
        let file = self.work_dir.join("auth-registry.htpasswd");
        write(&file, &line)?;
        let (process, address) = registry::start_with_auth(&self.work_dir, &file).await?;
        self.auth_registry = Some(process);
        let image = format!("{address}/private/test:v2");
        let credentials = format!("{username}:{password}");
        run(
            "skopeo",
            &[
                "--insecure-policy",
                "copy",
                "--src-tls-verify=false",
                "--dest-tls-verify=false",
                "--dest-creds",
                &credentials,
                &format!("docker://{}", self.images.v2),
                &format!("docker://{image}"),
            ],
        )
        .await
        .map_err(RealNodeError::Images)?;
        Ok(AuthRegistry {
            address,
            image,
            username: username.to_owned(),
            password: password.to_owned(),
        })
    }

    /// The process ids of kubelet, containerd and the registry.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        [
            &self.kubelet,
            &self.containerd,
            &self.registry_process,
            &self.auth_registry,
        ]
        .into_iter()
        .flatten()
        .map(|c| (c.name, c.pid()))
        .collect()
    }

    /// Where a component's log is: `kubelet`, `containerd` or `registry`.
    pub fn log(&self, component: &str) -> PathBuf {
        self.work_dir.join(format!("{component}.log"))
    }

    /// Stops kubelet, removes every container, stops containerd and the
    /// registry, unmounts what is left under the work dir and removes it.
    /// Returns what could not be cleaned up (empty when all went).
    pub async fn stop(&mut self) -> Vec<String> {
        if self.stopped {
            return leftovers(&self.work_dir);
        }
        self.stopped = true;
        if let Some(mut kubelet) = self.kubelet.take() {
            teardown::terminate(&mut kubelet).await;
        }
        self.delete_node().await;
        if let Some(mut containerd) = self.containerd.take() {
            containerd::remove_all_containers(&self.containerd_socket).await;
            teardown::terminate(&mut containerd).await;
        }
        teardown::kill_shims(&self.work_dir).await;
        for mut registry in [self.registry_process.take(), self.auth_registry.take()]
            .into_iter()
            .flatten()
        {
            teardown::terminate(&mut registry).await;
        }
        teardown::unmount_all(&self.work_dir).await;
        teardown::remove_kubelet_files(&self.work_dir, &self.runtime_dirs);
        teardown::remove_runtime_dirs(&self.runtime_dirs);
        let left = leftovers(&self.work_dir);
        if left.is_empty() {
            if let Err(error) = std::fs::remove_dir_all(&self.work_dir) {
                tracing::warn!(dir = %self.work_dir.display(), %error, "cannot remove the real node's dir");
            }
        } else {
            tracing::warn!(?left, "the real node left things behind");
        }
        left
    }

    /// Deletes the Node object (best effort, bounded: the cluster may be
    /// gone already); the pod garbage collector then removes its pods.
    async fn delete_node(&self) {
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
            kube::Api::all(self.client.clone());
        let params = kube::api::DeleteParams::default();
        let delete = nodes.delete(&self.name, &params);
        match tokio::time::timeout(std::time::Duration::from_secs(5), delete).await {
            Ok(Ok(_)) => {}
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => {}
            Ok(Err(error)) => tracing::warn!(node = %self.name, %error, "cannot delete the Node"),
            Err(_) => tracing::warn!(node = %self.name, "deleting the Node timed out"),
        }
    }

    async fn wait_ready(&mut self, cluster: &DevCluster) -> Result<(), RealNodeError> {
        let watched = |node: &mut Self| -> Result<(), RealNodeError> {
            for component in [&mut node.kubelet, &mut node.containerd]
                .into_iter()
                .flatten()
            {
                if let Some(message) = component.exited() {
                    let errors = log_errors(&component.log);
                    return Err(RealNodeError::Component(format!(
                        "{message}\nits error lines:\n{errors}"
                    )));
                }
            }
            Ok(())
        };
        let name = self.name.clone();
        let work_dir = self.work_dir.clone();
        kubelet::wait_ready(cluster, &name, &work_dir, || watched(self)).await
    }
}

impl std::fmt::Debug for RealNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealNode")
            .field("name", &self.name)
            .field("work_dir", &self.work_dir)
            .field("registry", &self.registry)
            .field("pids", &self.pids())
            .finish_non_exhaustive()
    }
}

impl Drop for RealNode {
    /// The async [`RealNode::stop`] is the way to stop; dropping a node that
    /// was not stopped does the same from a blocking context.
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let stop = async { self.stop().await };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(stop));
            }
            _ => match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => {
                    // A runtime cannot start inside another: run it on a
                    // thread of its own.
                    std::thread::scope(|scope| {
                        let _ = scope.spawn(|| runtime.block_on(stop)).join();
                    });
                }
                Err(error) => {
                    tracing::error!(%error, "cannot stop the real node: no runtime");
                }
            },
        }
    }
}

/// Fails with [`RealNodeError::Missing`] naming every missing tool.
pub fn check_tools() -> Result<(), RealNodeError> {
    let mut missing: Vec<String> = REQUIRED_TOOLS
        .iter()
        .filter(|(tool, _)| find_on_path(tool).is_none())
        .map(|(tool, package)| format!("`{tool}` (Debian package {package})"))
        .collect();
    match std::fs::read(BUSYBOX) {
        Ok(elf) if is_static_elf(&elf) => {}
        Ok(_) => missing.push(format!(
            "a static {BUSYBOX} (Debian package busybox-static; the dynamic `busybox` cannot run in the test images)"
        )),
        Err(_) => missing.push(format!("{BUSYBOX} (Debian package busybox-static)")),
    }
    if !Path::new(CNI_BIN_DIR).join("loopback").is_file() {
        missing.push(format!(
            "{CNI_BIN_DIR}/loopback (Debian package containernetworking-plugins)"
        ));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(RealNodeError::Missing {
            missing: missing.join(", "),
        })
    }
}

/// The last error and fatal lines of a klog or logrus log (kubelet's
/// reason to exit is rarely among its last lines).
fn log_errors(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text
        .lines()
        .filter(|line| {
            let klog = (line.starts_with('E') || line.starts_with('F'))
                && line.chars().nth(1).is_some_and(|c| c.is_ascii_digit());
            klog || line.contains("level=error") || line.contains("level=fatal")
        })
        .collect();
    errors[errors.len().saturating_sub(10)..].join("\n")
}

/// A 64-bit little-endian ELF executable without a program interpreter
/// (no `PT_INTERP` header): it runs in a rootfs without a libc.
fn is_static_elf(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |at: usize| {
        elf.get(at..at + 2)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes)
    };
    let u32_at = |at: usize| {
        elf.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |at: usize| {
        elf.get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if !elf.starts_with(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(offset), Some(size), Some(count)) = (u64_at(32), u16_at(54), u16_at(56)) else {
        return false;
    };
    let Ok(offset) = usize::try_from(offset) else {
        return false;
    };
    (0..usize::from(count))
        .all(|i| u32_at(offset + i * usize::from(size)).is_some_and(|kind| kind != PT_INTERP))
}

fn find_on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

/// The free disk a real node needs before it starts, in MiB: kubelet's
/// eviction floor (`EVICTION_FLOOR_MIB` in realnode/kubelet.rs) plus
/// the registry's images, containerd's snapshots, the pods' logs and what
/// the test containers write, with room to spare. A node started below it
/// goes under DiskPressure mid-test and its pods are evicted, a failure
/// far from its cause.
pub const MIN_FREE_DISK_MIB: u64 = 1024;

/// Refuses to start a node in `dir` when its disk has less than
/// [`MIN_FREE_DISK_MIB`] free.
fn check_free_disk(dir: &Path) -> Result<(), RealNodeError> {
    enough_free_disk(dir, free_disk_bytes(dir)?)
}

/// The bytes an unprivileged writer may still use on the disk of `dir`.
fn free_disk_bytes(dir: &Path) -> Result<u64, RealNodeError> {
    let stats = rustix::fs::statvfs(dir).map_err(|e| {
        RealNodeError::Setup(format!(
            "cannot read the free disk of {}: {e}",
            dir.display()
        ))
    })?;
    Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
}

/// The decision of [`check_free_disk`], given the bytes an unprivileged
/// writer may still use there.
fn enough_free_disk(dir: &Path, free_bytes: u64) -> Result<(), RealNodeError> {
    let free_mib = free_bytes >> 20;
    if free_mib >= MIN_FREE_DISK_MIB {
        return Ok(());
    }
    Err(RealNodeError::LowDisk {
        dir: dir.display().to_string(),
        free_mib,
        needed_mib: MIN_FREE_DISK_MIB,
    })
}

fn fresh_temp_dir() -> PathBuf {
    static COUNT: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "kruise-realnode-{}-{}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Runs a command to completion; its stdout on success, else an error
/// with its stderr.
fn write(path: &Path, text: &str) -> Result<(), RealNodeError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            RealNodeError::Setup(format!("cannot create {}: {e}", parent.display()))
        })?;
    }
    std::fs::write(path, text)
        .map_err(|e| RealNodeError::Setup(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{
        MIN_FREE_DISK_MIB, RealNodeError, check_free_disk, enough_free_disk, free_disk_bytes,
    };
    use std::path::Path;

    /// A full disk fails the start with the numbers and what to do, and is
    /// not taken for a machine that cannot host a node (which tests skip).
    #[test]
    fn a_node_needs_free_disk() {
        let dir = Path::new("/var/node");
        let floor = MIN_FREE_DISK_MIB << 20;
        assert!(enough_free_disk(dir, floor).is_ok());
        assert!(enough_free_disk(dir, u64::MAX).is_ok());
        let error = enough_free_disk(dir, floor - 1).unwrap_err();
        assert!(
            matches!(
                &error,
                RealNodeError::LowDisk { free_mib, needed_mib, .. }
                    if *free_mib == MIN_FREE_DISK_MIB - 1 && *needed_mib == MIN_FREE_DISK_MIB
            ),
            "{error:?}"
        );
        assert!(!error.is_unsupported_machine());
        let message = error.to_string();
        assert!(
            message.starts_with("only 1023 MiB free on the disk of /var/node,"),
            "{message}"
        );
        assert!(message.contains("at least 1024 MiB"), "{message}");
        assert!(matches!(
            enough_free_disk(dir, 0),
            Err(RealNodeError::LowDisk { free_mib: 0, .. })
        ));
    }

    /// The free disk read is what `df` reports (within what other writers
    /// on this shared machine may change between the two reads), and a
    /// directory that does not exist is a set-up error, not a full disk.
    #[test]
    fn the_free_disk_is_read_from_the_filesystem() {
        let dir = std::env::temp_dir();
        let ours_mib = free_disk_bytes(&dir).unwrap() >> 20;
        let df = std::process::Command::new("df")
            .args(["--output=avail", "-B1M"])
            .arg(&dir)
            .output()
            .unwrap();
        let text = String::from_utf8(df.stdout).unwrap();
        let df_mib: u64 = text.lines().nth(1).unwrap().trim().parse().unwrap();
        assert!(
            ours_mib.abs_diff(df_mib) <= 256,
            "ours {ours_mib} MiB, df {text}"
        );
        let missing = check_free_disk(Path::new("/nonexistent/kruise-realnode"));
        assert!(
            matches!(&missing, Err(RealNodeError::Setup(message)) if message.contains("/nonexistent/kruise-realnode")),
            "{missing:?}"
        );
    }

    #[test]
    fn static_executables_are_told_apart() {
        assert!(!super::is_static_elf(b"#!/bin/sh\n"));
        if let Ok(elf) = std::fs::read("/bin/sh") {
            // Debian's /bin/sh (dash) is dynamically linked.
            assert!(!super::is_static_elf(&elf));
        }
    }
}
