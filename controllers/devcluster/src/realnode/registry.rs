//! The local OCI registries: Debian's `docker-registry` (distribution v2)
//! on `127.0.0.1:<free port>`, plain HTTP, storage in the node's dir; the
//! node's own without auth, and on demand one that asks for basic auth
//! (an `htpasswd` file). Debian's default config listens on all addresses
//! with auth: not used.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{RealNodeError, write};
use crate::ports::free_ports;
use crate::process::{Component, log_tail};

const READY_DEADLINE: Duration = Duration::from_secs(20);

/// Starts the node's registry; returns it and its `127.0.0.1:<port>`.
pub async fn start(work_dir: &Path) -> Result<(Component, String), RealNodeError> {
    start_named(work_dir, "registry", None).await
}

/// Starts a registry that asks for the users of `htpasswd` (bcrypt).
pub async fn start_with_auth(
    work_dir: &Path,
    htpasswd: &Path,
) -> Result<(Component, String), RealNodeError> {
    start_named(work_dir, "auth-registry", Some(htpasswd)).await
}

async fn start_named(
    work_dir: &Path,
    name: &'static str,
    htpasswd: Option<&Path>,
) -> Result<(Component, String), RealNodeError> {
    let port = free_ports(1)
        .map_err(|e| RealNodeError::Setup(format!("no free port for the registry: {e}")))?
        .first()
        .copied()
        .ok_or_else(|| RealNodeError::Setup("no free port for the registry".to_owned()))?;
    let address = format!("127.0.0.1:{port}");
    let storage = work_dir.join(name);
    let config = work_dir.join(format!("{name}.yml"));
    let auth = htpasswd.map_or_else(String::new, |file| {
        format!(
            "auth:\n  htpasswd:\n    realm: kruise-devcluster\n    path: {}\n",
            file.display()
        )
    });
    write(
        &config,
        &format!(
            "version: 0.1\n\
             log:\n  level: warn\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: {address}\n  secret: kruise-devcluster-real-node\n{auth}",
            storage.display()
        ),
    )?;
    let program = super::find_on_path("docker-registry").ok_or_else(|| RealNodeError::Missing {
        missing: "`docker-registry` (Debian package docker-registry)".to_owned(),
    })?;
    let mut registry = Component::spawn(
        name,
        &program,
        &["serve".to_owned(), config.display().to_string()],
        work_dir,
    )
    .map_err(|e| RealNodeError::Component(format!("cannot start the registry: {e}")))?;
    let started = Instant::now();
    loop {
        if let Some(message) = registry.exited() {
            return Err(RealNodeError::Component(message));
        }
        if tokio::net::TcpStream::connect(&address).await.is_ok() {
            return Ok((registry, address));
        }
        if started.elapsed() > READY_DEADLINE {
            return Err(RealNodeError::Component(format!(
                "the registry did not listen on {address} within {} s; the end of {}:\n{}",
                READY_DEADLINE.as_secs(),
                registry.log.display(),
                log_tail(&registry.log)
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
