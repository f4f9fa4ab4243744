//! Kubewarden's policy-server, started beside our server for the
//! side-by-side bench: the same modules and settings (written out as its
//! policies.yml), the same workers, transport and loopback address. With a
//! kubeconfig it reads that cluster (the policies that read the cluster are
//! granted their kinds and the Kubernetes host calls, as our server grants
//! them); without one it runs without a cluster
//! (`--ignore-kubernetes-connection-failure`). It logs warnings only, as
//! ours does (at its default, info, it writes a line per request). Killed
//! when dropped.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::admission::Settings;
use crate::metadata::Metadata;
use crate::server::TlsFiles;

/// How long policy-server may take to compile the modules and start.
const START_DEADLINE: Duration = Duration::from_mins(3);

/// One policy as both servers load it.
#[derive(Debug, Clone)]
pub struct PolicyFile<'a> {
    pub id: &'a str,
    pub wasm: &'a [u8],
    pub settings: Settings,
    /// Whether our server may start its evaluations from a snapshot
    /// (`policy::load_module`); policy-server has none either way.
    pub snapshot: bool,
    /// Whether the policy reads the cluster: it is granted the kinds its
    /// metadata declares (`contextAwareResources`) and the Kubernetes host
    /// calls.
    pub reads_cluster: bool,
}

/// The host calls a policy that reads the cluster is granted, on both
/// servers.
pub const KUBERNETES_CAPABILITIES: &str = "kubernetes/*";

#[derive(Debug)]
pub struct PolicyServer {
    child: Child,
    pub address: SocketAddr,
    /// Its modules, policies.yml and log; removed when it is dropped.
    dir: PathBuf,
    log: PathBuf,
}

impl PolicyServer {
    /// Writes the modules and policies.yml under `dir` (a directory of its
    /// own) and starts `program` on them, reading the cluster of
    /// `kubeconfig` if there is one; returns once its readiness probe
    /// answers 200.
    pub fn start(
        program: &Path,
        dir: &Path,
        policies: &[PolicyFile<'_>],
        workers: usize,
        tls: Option<&TlsFiles>,
        kubeconfig: Option<&Path>,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let policies_file = write_policies(dir, policies)?;
        let (port, readiness) = (free_port()?, free_port()?);
        let log = dir.join("policy-server.log");
        let output = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let errors = output.try_clone().map_err(|e| e.to_string())?;
        // It runs in `dir`: relative paths would not resolve there.
        let absolute =
            |path: &Path| std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()));
        let mut command = Command::new(absolute(program)?);
        command
            .current_dir(dir)
            .arg("--policies")
            .arg(&policies_file)
            .args(["--addr", "127.0.0.1", "--workers", &workers.to_string()])
            .args(["--port", &port.to_string()])
            .args(["--readiness-probe-port", &readiness.to_string()])
            // It logs every request at info; ours logs none.
            .args(["--log-level", "warn", "--log-no-color"])
            .arg("--policies-download-dir")
            .arg(dir)
            .arg("--sigstore-cache-dir")
            .arg(dir.join("sigstore"))
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors);
        match kubeconfig {
            Some(path) => command.env("KUBECONFIG", absolute(path)?),
            None => command.arg("--ignore-kubernetes-connection-failure"),
        };
        if let Some(files) = tls {
            command
                .arg("--cert-file")
                .arg(absolute(&files.cert)?)
                .arg("--key-file")
                .arg(absolute(&files.key)?);
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let mut server = Self {
            child,
            address: ([127, 0, 0, 1], port).into(),
            dir: dir.to_owned(),
            log,
        };
        server.wait_ready(([127, 0, 0, 1], readiness).into())?;
        Ok(server)
    }

    fn wait_ready(&mut self, readiness: SocketAddr) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "policy-server exited ({status}): {}",
                    self.log_tail()
                ));
            }
            if http_status(readiness, "/readiness") == Some(200) {
                return Ok(());
            }
            if started.elapsed() > START_DEADLINE {
                return Err(format!(
                    "policy-server not ready within {} s: {}",
                    START_DEADLINE.as_secs(),
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(10).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for PolicyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// policy-server's policies.yml for `policies`, each module beside it.
fn write_policies(dir: &Path, policies: &[PolicyFile<'_>]) -> Result<PathBuf, String> {
    let mut entries = Map::new();
    for policy in policies {
        let module = dir.join(format!("{}.wasm", policy.id));
        std::fs::write(&module, policy.wasm).map_err(|e| format!("{}: {e}", module.display()))?;
        let mut entry = json!({
            "module": format!("file://{}", module.display()),
            "allowedToMutate": true,
            "settings": policy.settings,
        });
        if policy.reads_cluster {
            let kinds = Metadata::of(policy.wasm)?.context_aware_resources;
            entry["contextAwareResources"] = json!(kinds);
            entry["hostCapabilities"] = json!([KUBERNETES_CAPABILITIES]);
        }
        entries.insert(policy.id.to_owned(), entry);
    }
    let path = dir.join("policies.yml");
    let yaml = serde_yaml::to_string(&Value::Object(entries)).map_err(|e| e.to_string())?;
    std::fs::write(&path, yaml).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// The status of a plain-HTTP GET, or `None` when nothing answers.
fn http_status(address: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split(' ').nth(1)?.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// policies.yml as written for `file` in a directory of its own (the
    /// module files beside it), read back.
    fn written(file: PolicyFile<'_>, dir: &Path) -> Value {
        std::fs::create_dir_all(dir).unwrap();
        let path = write_policies(dir, &[file]).unwrap();
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn policies_yml_names_each_module_file_with_its_settings() {
        let dir = std::env::temp_dir().join(format!("bench-policies-{}", std::process::id()));
        let settings = json!({"key": "k", "value": "v"});
        let written = written(
            PolicyFile {
                id: "add-label",
                wasm: b"\0asm",
                settings: settings.as_object().unwrap().clone(),
                snapshot: true,
                reads_cluster: false,
            },
            &dir,
        );
        let module = dir.join("add-label.wasm");
        assert_eq!(
            written,
            json!({"add-label": {
                "module": format!("file://{}", module.display()),
                "allowedToMutate": true,
                "settings": {"key": "k", "value": "v"},
            }})
        );
        assert_eq!(std::fs::read(module).unwrap(), b"\0asm");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_policy_reading_the_cluster_is_granted_its_kinds_and_the_kubernetes_calls() {
        let dir = std::env::temp_dir().join(format!("bench-cluster-{}", std::process::id()));
        let written = written(
            PolicyFile {
                id: "sidecarset-cluster",
                wasm: kruise_policy_modules::SIDECARSET.wasm,
                settings: Settings::new(),
                snapshot: true,
                reads_cluster: true,
            },
            &dir,
        );
        let entry = &written["sidecarset-cluster"];
        assert_eq!(entry["hostCapabilities"], json!(["kubernetes/*"]));
        assert_eq!(
            entry["contextAwareResources"],
            json!([
                {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet"},
                {"apiVersion": "v1", "kind": "Namespace"},
                {"apiVersion": "apps/v1", "kind": "ControllerRevision"},
            ])
        );
        assert_eq!(entry["settings"], json!({}));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
