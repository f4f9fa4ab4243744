//! Our images (`kruise-manager build-images`), packed reproducibly with
//! Debian's umoci and pushed with skopeo: the manager's, which the node
//! agent's DaemonSet runs too, and the webhook host's, with the policy
//! modules under `/policies` (where the generated policies.yml points).

use std::path::{Path, PathBuf};

use kruise_devcluster::oci;
use kruise_policy_modules::ALL;

use crate::deploy::MODULE_DIR;

/// The repositories `artifacts/deploy` names, under a registry.
pub const MANAGER_REPOSITORY: &str = "kruise-wasm/manager";
pub const HOST_REPOSITORY: &str = "kruise-wasm/host";

/// The OCI layout under `work` that holds the images, tagged `manager`
/// and `host`.
pub fn layout(work: &Path) -> PathBuf {
    work.join("oci")
}

/// Packs the manager image from `binary`; its digest.
pub async fn manager_image(work: &Path, binary: &Path) -> Result<String, String> {
    oci::binary_image(work, &layout(work), "manager", binary, &[]).await
}

/// Packs the host image from `binary` and the embedded modules; its digest.
pub async fn host_image(work: &Path, binary: &Path) -> Result<String, String> {
    let modules: Vec<(String, &[u8])> = ALL
        .iter()
        .map(|module| (format!("{MODULE_DIR}/{}.wasm", module.name), module.wasm))
        .collect();
    oci::binary_image(work, &layout(work), "host", binary, &modules).await
}

/// Pushes both as `<registry>/<repository>:<tag>`.
pub async fn push(work: &Path, registry: &str, tag: &str) -> Result<Vec<String>, String> {
    let mut pushed = Vec::new();
    for (layout_tag, repository) in [("manager", MANAGER_REPOSITORY), ("host", HOST_REPOSITORY)] {
        let reference = format!("{registry}/{repository}:{tag}");
        oci::push(&layout(work), layout_tag, &reference).await?;
        pushed.push(reference);
    }
    Ok(pushed)
}
