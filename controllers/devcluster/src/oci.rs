//! OCI images made without Docker, from Debian's tools: a root filesystem
//! packed into an OCI layout by `umoci` and copied to a registry by
//! `skopeo`.
//!
//! Packing is reproducible: every file is dated 1970, no history is
//! written and the image's creation time is fixed, so the same files give
//! the same manifest digest.

use std::path::Path;

use serde_json::Value;

/// What runs when the image starts.
#[derive(Debug, Clone, Copy)]
pub struct ImageConfig<'a> {
    pub entrypoint: &'a [&'a str],
    pub env: &'a [&'a str],
    /// A numeric `uid[:gid]`; `None` runs as root.
    pub user: Option<&'a str>,
}

const EPOCH: &str = "1970-01-01T00:00:00Z";

/// Packs `rootfs` as `<layout>:<tag>` (the layout is created if missing);
/// the manifest's digest (`sha256:...`).
pub async fn pack(
    rootfs: &Path,
    layout: &Path,
    tag: &str,
    config: ImageConfig<'_>,
) -> Result<String, String> {
    if !layout.join("index.json").exists() {
        run("umoci", &["init", "--layout", &display(layout)]).await?;
    }
    date_everything_1970(rootfs)?;
    let image = format!("{}:{tag}", display(layout));
    run("umoci", &["new", "--image", &image]).await?;
    let rootfs = display(rootfs);
    run(
        "umoci",
        &["insert", "--no-history", "--image", &image, &rootfs, "/"],
    )
    .await?;
    let mut args = vec![
        "config",
        "--no-history",
        "--image",
        &image,
        "--created",
        EPOCH,
        "--config.workingdir",
        "/",
    ];
    for part in config.entrypoint {
        args.extend(["--config.entrypoint", part]);
    }
    for variable in config.env {
        args.extend(["--config.env", variable]);
    }
    if let Some(user) = config.user {
        args.extend(["--config.user", user]);
    }
    run("umoci", &args).await?;
    manifest_digest(layout, tag)
}

/// The image of one of our binaries: `binary` at `/<its file name>`, the
/// entrypoint, with the libraries it links and `files` (path in the image,
/// contents) beside it, run as uid 65532 unless a pod says otherwise.
/// The root filesystem is assembled in `work`; packed as `<layout>:<tag>`.
pub async fn binary_image(
    work: &Path,
    layout: &Path,
    tag: &str,
    binary: &Path,
    files: &[(String, &[u8])],
) -> Result<String, String> {
    let name = binary
        .file_name()
        .and_then(|name| name.to_str())
        .ok_or_else(|| format!("{} names no file", binary.display()))?;
    let rootfs = work.join(format!("rootfs-{tag}"));
    let _ = std::fs::remove_dir_all(&rootfs);
    let tmp = rootfs.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    add_binary(&rootfs, binary, name).await?;
    for (path, contents) in files {
        let target = rootfs.join(path.trim_start_matches('/'));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&target, contents)
            .map_err(|e| format!("cannot write {}: {e}", target.display()))?;
    }
    let entrypoint = format!("/{name}");
    let config = ImageConfig {
        entrypoint: &[&entrypoint],
        env: &[],
        user: Some("65532"),
    };
    pack(&rootfs, layout, tag, config).await
}

/// Copies `<layout>:<tag>` to `reference` (`127.0.0.1:5000/repo:tag`, a
/// plain-HTTP registry).
pub async fn push(layout: &Path, tag: &str, reference: &str) -> Result<(), String> {
    let source = format!("oci:{}:{tag}", display(layout));
    let destination = format!("docker://{reference}");
    run(
        "skopeo",
        &[
            "--insecure-policy",
            "copy",
            "--dest-tls-verify=false",
            &source,
            &destination,
        ],
    )
    .await
    .map(|_| ())
}

/// Copies `binary` to `<rootfs>/<name>` with the shared libraries and the
/// loader it needs (as `ldd` lists them), at their own paths.
pub async fn add_binary(rootfs: &Path, binary: &Path, name: &str) -> Result<(), String> {
    copy_into(rootfs, binary, Path::new(name))?;
    let listing = run("ldd", &[&display(binary)]).await?;
    for library in libraries(&listing) {
        copy_into(rootfs, Path::new(library), Path::new(library))?;
    }
    Ok(())
}

/// The absolute paths in `ldd`'s listing: `libc.so.6 => /lib/.../libc.so.6
/// (0x...)` and the loader's `/lib64/ld-linux-x86-64.so.2 (0x...)`.
fn libraries(listing: &str) -> Vec<&str> {
    listing
        .lines()
        .filter_map(|line| {
            let path = match line.split_once("=>") {
                Some((_, target)) => target.split_whitespace().next(),
                None => line.split_whitespace().next(),
            }?;
            path.starts_with('/').then_some(path)
        })
        .collect()
}

fn copy_into(rootfs: &Path, source: &Path, destination: &Path) -> Result<(), String> {
    let target = rootfs.join(destination.strip_prefix("/").unwrap_or(destination));
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    // The real file, not a link to it: links would dangle in the image.
    std::fs::copy(source, &target).map(|_| ()).map_err(|e| {
        format!(
            "cannot copy {} to {}: {e}",
            source.display(),
            target.display()
        )
    })
}

fn date_everything_1970(rootfs: &Path) -> Result<(), String> {
    let status = std::process::Command::new("find")
        .arg(rootfs)
        .args(["-exec", "touch", "-h", "-d", "@0", "{}", "+"])
        .status()
        .map_err(|e| format!("cannot run find: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "cannot date the files of {}: {status}",
            rootfs.display()
        ))
    }
}

/// The digest `index.json` gives the manifest tagged `tag`.
fn manifest_digest(layout: &Path, tag: &str) -> Result<String, String> {
    let path = layout.join("index.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let index: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|manifest| {
            manifest["annotations"]["org.opencontainers.image.ref.name"].as_str() == Some(tag)
        })
        .and_then(|manifest| manifest["digest"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| format!("{} has no manifest tagged {tag}", path.display()))
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// Runs `program`; its stdout, or an error with its stderr.
pub(crate) async fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ldd_listings_give_the_libraries_and_the_loader() {
        let listing = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                       \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f1)\n\
                       \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)\n\
                       \t/lib64/ld-linux-x86-64.so.2 (0x00007f3)\n";
        assert_eq!(
            libraries(listing),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }

    #[tokio::test]
    async fn the_same_files_pack_to_the_same_digest() {
        let dir = std::env::temp_dir().join(format!("kruise-oci-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let config = ImageConfig {
            entrypoint: &["/bin/tool", "run"],
            env: &["PATH=/bin"],
            user: Some("65532"),
        };
        let mut digests = Vec::new();
        for attempt in ["first", "second"] {
            let rootfs = dir.join(attempt).join("rootfs");
            std::fs::create_dir_all(rootfs.join("bin")).unwrap();
            std::fs::write(rootfs.join("bin/tool"), b"#!/bin/sh\n").unwrap();
            let layout = dir.join(attempt).join("oci");
            digests.push(pack(&rootfs, &layout, "v1", config).await.unwrap());
            // A second tag in the same layout is found by its own name.
            std::fs::write(rootfs.join("bin/tool"), b"#!/bin/sh\necho changed\n").unwrap();
            let changed = pack(&rootfs, &layout, "v2", config).await.unwrap();
            assert_ne!(changed, digests[digests.len() - 1]);
        }
        assert_eq!(digests[0], digests[1], "packing is reproducible");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
