//! Stopping the node's processes and finding what a stop left behind:
//! processes whose command line names the node's dir (kubelet, containerd,
//! its shims, the registry) and mounts under it (container root
//! filesystems, sandbox `/dev/shm`s, kubelet's volume mounts).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::run;
use crate::process::Component;

const TERM_GRACE: Duration = Duration::from_secs(10);

/// SIGTERM, up to [`TERM_GRACE`] to exit, then SIGKILL; always reaped.
pub async fn terminate(component: &mut Component) {
    if component.exited().is_none() {
        let pid = component.pid().to_string();
        if run("kill", &["-TERM", &pid]).await.is_ok() {
            let started = Instant::now();
            while started.elapsed() < TERM_GRACE {
                if component.exited().is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    component.stop();
}

/// Kills the containerd shims this node started (they outlive containerd
/// when a task could not be deleted) and waits until they are gone.
pub async fn kill_shims(work_dir: &Path) {
    let dir = work_dir.display().to_string();
    let shims = || {
        processes()
            .into_iter()
            .filter(|(_, cmdline)| cmdline.contains("containerd-shim") && cmdline.contains(&dir))
            .map(|(pid, _)| pid)
            .collect::<Vec<_>>()
    };
    for pid in shims() {
        tracing::warn!(pid, "a containerd shim outlived containerd: killing it");
        let _ = run("kill", &["-KILL", &pid.to_string()]).await;
    }
    let started = Instant::now();
    while !shims().is_empty() && started.elapsed() < TERM_GRACE {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Unmounts everything mounted under `work_dir`, deepest first (lazily
/// when a plain unmount fails).
pub async fn unmount_all(work_dir: &Path) {
    let mut points = mounts_under(work_dir);
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for point in points {
        if let Err(error) = run("umount", &[&point]).await {
            tracing::debug!(%error, "plain unmount failed: unmounting lazily");
            if let Err(error) = run("umount", &["-l", &point]).await {
                tracing::warn!(%error, "cannot unmount");
            }
        }
    }
}

/// kubelet's directories that ignore `--root-dir` (hard-coded upstream):
/// the device plugins' socket dir and the legacy container log links.
pub const KUBELET_DEVICE_PLUGINS: &str = "/var/lib/kubelet/device-plugins";
pub const KUBELET_LOG_LINKS: &str = "/var/log/containers";

/// Directories made outside the node's dir: containerd's `/run/containerd`
/// (shim sockets under `s/`), the `k8s.io` parent cgroups, and kubelet's
/// hard-coded [`KUBELET_DEVICE_PLUGINS`] and [`KUBELET_LOG_LINKS`]. The ones
/// missing now are removed by [`remove_runtime_dirs`] once empty.
pub fn missing_runtime_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = [
        "/run/containerd/s",
        "/run/containerd",
        KUBELET_DEVICE_PLUGINS,
        "/var/lib/kubelet",
        KUBELET_LOG_LINKS,
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect();
    if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
        dirs.extend(
            hierarchies
                .filter_map(Result::ok)
                .map(|h| h.path().join("k8s.io")),
        );
    }
    dirs.push(PathBuf::from("/sys/fs/cgroup/k8s.io"));
    dirs.retain(|dir| !dir.exists());
    dirs
}

/// Removes the container log links kubelet made for this node's pods, and
/// kubelet's device-plugin socket where this node made its dir.
pub fn remove_kubelet_files(work_dir: &Path, created: &[PathBuf]) {
    for link in log_links_into(work_dir) {
        if let Err(error) = std::fs::remove_file(&link) {
            tracing::warn!(link = %link.display(), %error, "cannot remove a container log link");
        }
    }
    let device_plugins = Path::new(KUBELET_DEVICE_PLUGINS);
    if created.iter().any(|dir| dir == device_plugins) {
        let _ = std::fs::remove_file(device_plugins.join("kubelet.sock"));
    }
}

/// Removes these directories where they are empty (an empty cgroup is
/// removed with rmdir as well); a directory in use stays.
pub fn remove_runtime_dirs(dirs: &[PathBuf]) {
    for dir in dirs {
        if dir.is_dir()
            && let Err(error) = std::fs::remove_dir(dir)
        {
            tracing::debug!(dir = %dir.display(), %error, "kept");
        }
    }
}

/// The links in [`KUBELET_LOG_LINKS`] that point into `work_dir`.
fn log_links_into(work_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(KUBELET_LOG_LINKS) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|link| std::fs::read_link(link).is_ok_and(|target| target.starts_with(work_dir)))
        .collect()
}

/// What a node with this dir left behind: processes naming the dir on
/// their command line, mounts under it, and kubelet's log links into it. Empty after a clean stop.
pub fn leftovers(work_dir: &Path) -> Vec<String> {
    let dir = work_dir.display().to_string();
    let own = std::process::id();
    let mut left: Vec<String> = processes()
        .into_iter()
        .filter(|(pid, cmdline)| *pid != own && cmdline.contains(&dir))
        .map(|(pid, cmdline)| format!("process {pid}: {cmdline}"))
        .collect();
    left.extend(
        log_links_into(work_dir)
            .into_iter()
            .map(|link| format!("container log link {}", link.display())),
    );
    left.extend(
        mounts_under(work_dir)
            .into_iter()
            .map(|point| format!("mount {point}")),
    );
    left
}

/// Every process's id and command line (arguments joined by spaces).
fn processes() -> Vec<(u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline)
                .split('\0')
                .filter(|arg| !arg.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            (!cmdline.is_empty()).then_some((pid, cmdline))
        })
        .collect()
}

/// Mount points under `dir`, from `/proc/mounts`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(unescape_mount_point)
        .filter(|point| point == &dir || point.starts_with(&format!("{dir}/")))
        .collect()
}

/// `/proc/mounts` writes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_point(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        if let Some(code) = code {
            out.push(char::from(code));
            rest = &rest[at + 4..];
        } else {
            out.push('\\');
            rest = &rest[at + 1..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::unescape_mount_point;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount_point(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape_mount_point("/plain"), "/plain");
    }
}
