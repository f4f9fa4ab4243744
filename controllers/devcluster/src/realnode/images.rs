//! The test images: a static busybox in a rootfs with a few applet links,
//! packed and pushed to the local registry by [`crate::oci`].

use std::path::Path;

use super::{BUSYBOX, RealNodeError};
use crate::oci::{self, ImageConfig};

/// The file in the test image that holds its version (`v1` or `v2`); the
/// image also sets `KRUISE_TEST_VERSION` and prints the version on start.
pub const VERSION_FILE: &str = "/etc/kruise-test-version";

/// The busybox applets the images link (everything else: `busybox NAME`).
const APPLETS: [&str; 12] = [
    "sh", "sleep", "true", "false", "echo", "cat", "ls", "env", "ps", "kill", "date", "wget",
];

/// Image references in the local registry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestImages {
    /// The sandbox ("pause") image containerd uses for every pod.
    pub pause: String,
    /// The test image, version 1.
    pub v1: String,
    /// The test image, version 2: another layer (the version file), another
    /// env and so another image ID than `v1`.
    pub v2: String,
}

/// Builds the three images under `work_dir/images` and pushes them to
/// `registry` (`127.0.0.1:<port>`).
pub async fn build_and_push(work_dir: &Path, registry: &str) -> Result<TestImages, RealNodeError> {
    let dir = work_dir.join("images");
    let images = TestImages {
        pause: format!("{registry}/kruise-devcluster/pause:1"),
        v1: format!("{registry}/kruise-devcluster/test:v1"),
        v2: format!("{registry}/kruise-devcluster/test:v2"),
    };
    // Both stop at once on SIGTERM (PID 1 has no default signal actions).
    let pause = "trap 'exit 0' TERM INT; sleep infinity & wait";
    build(&dir, "pause", None, pause, &images.pause).await?;
    for (version, reference) in [("v1", &images.v1), ("v2", &images.v2)] {
        let script = format!(
            "trap 'exit 0' TERM INT; echo \"kruise test image $KRUISE_TEST_VERSION\"; cat {VERSION_FILE}; sleep infinity & wait"
        );
        build(&dir, version, Some(version), &script, reference).await?;
    }
    Ok(images)
}

async fn build(
    dir: &Path,
    tag: &str,
    version: Option<&str>,
    script: &str,
    reference: &str,
) -> Result<(), RealNodeError> {
    let rootfs = dir.join(format!("rootfs-{tag}"));
    make_rootfs(&rootfs, version)?;
    let layout = dir.join("oci");
    let version_env = version.map(|v| format!("KRUISE_TEST_VERSION={v}"));
    let mut env = vec!["PATH=/bin"];
    env.extend(version_env.as_deref());
    let config = ImageConfig {
        entrypoint: &["/bin/sh", "-c", script],
        env: &env,
        user: None,
    };
    oci::pack(&rootfs, &layout, tag, config)
        .await
        .map_err(RealNodeError::Images)?;
    oci::push(&layout, tag, reference)
        .await
        .map_err(RealNodeError::Images)
}

fn make_rootfs(rootfs: &Path, version: Option<&str>) -> Result<(), RealNodeError> {
    let io = |what: &str, path: &Path| {
        let what = format!("{what} {}", path.display());
        move |e: std::io::Error| RealNodeError::Images(format!("{what}: {e}"))
    };
    let bin = rootfs.join("bin");
    for dir in [&bin, &rootfs.join("etc"), &rootfs.join("tmp")] {
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
    }
    let busybox = bin.join("busybox");
    std::fs::copy(BUSYBOX, &busybox).map_err(io("cannot copy busybox to", &busybox))?;
    for applet in APPLETS {
        let link = bin.join(applet);
        std::os::unix::fs::symlink("busybox", &link).map_err(io("cannot link", &link))?;
    }
    if let Some(version) = version {
        let file = rootfs.join(VERSION_FILE.trim_start_matches('/'));
        std::fs::write(&file, format!("{version}\n")).map_err(io("cannot write", &file))?;
    }
    Ok(())
}
