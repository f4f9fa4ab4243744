//! The control plane's executables, built from `go/` with the Go toolchain
//! and cached outside the clone, keyed by a digest of the Go module's
//! sources: a second start finds them in place and builds nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The commands `go/` builds, by the file name they get.
const TOOLS: [(&str, &str); 5] = [
    ("etcd", "./cmd/etcd"),
    ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
    (
        "kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
    ),
    ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
    ("kubelet", "k8s.io/kubernetes/cmd/kubelet"),
];

/// The Kubernetes release `go/go.mod` requires, stamped into the
/// binaries (a module build has no git tree to read it from).
const KUBERNETES_VERSION: &str = "v1.37.2";

fn ldflags() -> String {
    let stamp = |package: &str| {
        format!(
            "-X {package}.gitVersion={KUBERNETES_VERSION} -X {package}.gitMajor=1 -X {package}.gitMinor=37 -X {package}.gitTreeState=clean"
        )
    };
    format!(
        "-s -w {} {}",
        stamp("k8s.io/component-base/version"),
        stamp("k8s.io/client-go/pkg/version")
    )
}

/// The sources whose digest names the cache entry.
const SOURCES: [&str; 3] = ["go.mod", "go.sum", "cmd/etcd/main.go"];

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("cannot read the dev cluster's Go module at {path}: {source}")]
    Sources {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot run `go` (is Go 1.26 installed and on PATH?): {0}")]
    GoMissing(std::io::Error),
    #[error("`go build` failed ({status}); its output:\n{output}")]
    GoBuild { status: String, output: String },
    #[error("cannot prepare {path}: {source}")]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where the executables are.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// The Go module this crate ships.
    pub fn go_module() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("go")
    }

    /// The cache root: `$KRUISE_WASM_DEVCLUSTER_BIN`, else
    /// `/var/tmp/kruise-wasm/devcluster-bin`.
    pub fn cache_root() -> PathBuf {
        std::env::var_os("KRUISE_WASM_DEVCLUSTER_BIN").map_or_else(
            || PathBuf::from("/var/tmp/kruise-wasm/devcluster-bin"),
            PathBuf::from,
        )
    }

    /// The executables for the current sources, built if missing.
    pub fn ensure() -> Result<Self, BuildError> {
        let module = Self::go_module();
        let dir = Self::cache_root().join(sources_digest(&module)?);
        let binaries = Self { dir };
        if binaries.complete() {
            return Ok(binaries);
        }
        binaries.build(&module)?;
        Ok(binaries)
    }

    pub fn path(&self, tool: &str) -> PathBuf {
        self.dir.join(tool)
    }

    fn complete(&self) -> bool {
        TOOLS.iter().all(|(name, _)| self.path(name).is_file())
    }

    /// Builds into a scratch directory and renames it into place, so an
    /// interrupted build never leaves a half-filled cache entry.
    fn build(&self, module: &Path) -> Result<(), BuildError> {
        let cache = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BuildError::Cache { path, source }
        };
        let scratch = self
            .dir
            .with_extension(format!("partial-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).map_err(cache(&scratch))?;
        tracing::info!(dir = %self.dir.display(), "building the dev cluster's Go binaries (minutes on a cold Go cache)");
        let output = Command::new("go")
            .current_dir(module)
            // Build stamps would read the clone's git state: not wanted, and
            // not possible where the clone has no .git.
            .env("GOFLAGS", "-buildvcs=false")
            .args([
                "build",
                "-trimpath",
                &format!("-ldflags={}", ldflags()),
                "-o",
            ])
            .arg(&scratch)
            .args(TOOLS.iter().map(|(_, package)| package))
            .output()
            .map_err(BuildError::GoMissing)?;
        if !output.status.success() {
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(BuildError::GoBuild {
                status: output.status.to_string(),
                output: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        // Another process may have finished the same build first: theirs
        // is as good as ours.
        if std::fs::rename(&scratch, &self.dir).is_err() && self.complete() {
            let _ = std::fs::remove_dir_all(&scratch);
        }
        if self.complete() {
            Ok(())
        } else {
            Err(BuildError::Cache {
                path: self.dir.clone(),
                source: std::io::Error::other("the build left some executables missing"),
            })
        }
    }
}

fn sources_digest(module: &Path) -> Result<String, BuildError> {
    let mut digest = Sha256::new();
    digest.update(ldflags());
    for source in SOURCES {
        let path = module.join(source);
        let bytes = std::fs::read(&path).map_err(|source| BuildError::Sources { path, source })?;
        digest.update(source.as_bytes());
        digest.update(bytes);
    }
    Ok(crate::hex(&digest.finalize()[..8]))
}
