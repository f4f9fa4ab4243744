//! Builds the policy crates for `wasm32-wasip1` and writes each module's
//! `io.kubewarden.metadata` custom section (what `kwctl annotate` does), so
//! policy-server and our host accept the files as they are.
//!
//! The nested cargo uses its own target directory: the outer build holds the
//! lock on its own.

use std::path::{Path, PathBuf};
use std::process::Command;

/// (package, folder under policies/ that is also the module's name)
const POLICIES: &[(&str, &str)] = &[
    ("kruise-policy-sidecarset", "sidecarset"),
    ("kruise-policy-launch-priority", "launch-priority"),
    (
        "kruise-validate-resourcedistribution",
        "validate-resourcedistribution",
    ),
    ("kruise-validate-sidecarset", "validate-sidecarset"),
    ("kruise-validate-cloneset", "validate-cloneset"),
    ("kruise-mutate-crr", "mutate-crr"),
    ("kruise-mutate-imagepull", "mutate-imagepull"),
    ("kruise-mutate-defaults", "mutate-defaults"),
    ("kruise-bench-add-label", "add-label"),
];

const TARGET: &str = "wasm32-wasip1";
const GUEST_STACK_BYTES: usize = 256 << 10;
const PROFILE: &str = "wasm-policy";
const METADATA_SECTION: &str = "io.kubewarden.metadata";

fn main() {
    if let Err(message) = run() {
        for line in message.lines() {
            println!("cargo::error={line}");
        }
    }
}

fn run() -> Result<(), String> {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
    let workspace = manifest_dir.join("../..");
    let out_dir = PathBuf::from(env("OUT_DIR")?);
    for watched in [
        "policies/api",
        "policies/core",
        "policies/support",
        "Cargo.lock",
        // The workspace manifest: the wasm-policy profile lives there.
        "Cargo.toml",
    ] {
        println!(
            "cargo::rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    println!("cargo::rerun-if-env-changed=KRUISE_WASM_TARGET_DIR");

    let target_dir = std::env::var_os("KRUISE_WASM_TARGET_DIR")
        .map_or_else(|| default_target_dir(&out_dir), PathBuf::from);
    let mut cargo = Command::new(env("CARGO")?);
    cargo
        .current_dir(&workspace)
        .args(["build", "--target", TARGET, "--profile", PROFILE])
        .arg("--target-dir")
        .arg(&target_dir);
    for (package, folder) in POLICIES {
        cargo.args(["-p", package]);
        println!(
            "cargo::rerun-if-changed={}",
            workspace.join("policies").join(folder).display()
        );
    }
    // What the outer build set for itself (flags, lint wrappers) is not for
    // the wasm build.
    for variable in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
    ] {
        cargo.env_remove(variable);
    }
    // A shadow stack of 256 KiB instead of Rust's 1 MiB default: our
    // policies use at most ~40 KiB of it (sidecarset on the seed pod), and
    // every page of linear memory a guest has touched is reset after each
    // evaluation (docs/benchmarks.md), so the smaller the memory, the
    // cheaper a fresh instance. An overflow traps (the stack comes first
    // in memory), it cannot corrupt data.
    cargo.env(
        "CARGO_ENCODED_RUSTFLAGS",
        format!("-Clink-arg=-zstack-size={GUEST_STACK_BYTES}"),
    );
    let output = cargo
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        // Shown without -vv: the lines that say what failed.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.trim_start().starts_with("Compiling"))
            .collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        return Err(format!(
            "building the policies for {TARGET} failed ({}):\n{tail}",
            output.status
        ));
    }

    for (package, folder) in POLICIES {
        let built = target_dir
            .join(TARGET)
            .join(PROFILE)
            .join(format!("{}.wasm", package.replace('-', "_")));
        let module = std::fs::read(&built).map_err(|e| format!("{}: {e}", built.display()))?;
        let metadata_path = workspace.join("policies").join(folder).join("metadata.yml");
        let metadata = metadata_json(&metadata_path)?;
        let annotated = append_custom_section(module, METADATA_SECTION, metadata.as_bytes());
        let output = out_dir.join(format!("{folder}.wasm"));
        std::fs::write(&output, annotated).map_err(|e| format!("{}: {e}", output.display()))?;
    }
    Ok(())
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("cargo did not set {name}"))
}

/// `<target>/wasm-policies`, found from OUT_DIR (`<target>/<profile>/build/<pkg>/out`).
fn default_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .nth(4)
        .unwrap_or(out_dir)
        .join("wasm-policies")
}

/// The metadata as compact JSON with `protocolVersion: v1`, which our
/// policies' `protocol_version` operation answers (a test checks it).
fn metadata_json(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut metadata: serde_json::Value =
        serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(fields) = metadata.as_object_mut() else {
        return Err(format!("{}: not a mapping", path.display()));
    };
    fields.insert("protocolVersion".to_owned(), "v1".into());
    serde_json::to_string(&metadata).map_err(|e| format!("{}: {e}", path.display()))
}

/// Custom sections may stand anywhere after the header; readers take the
/// first one of a name, so this must run on the raw build output only.
fn append_custom_section(mut module: Vec<u8>, name: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = leb128(name.len());
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    module.push(0); // custom section id
    module.extend(leb128(body.len()));
    module.extend(body);
    module
}

fn leb128(mut value: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        #[allow(clippy::cast_possible_truncation)] // masked to 7 bits
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            bytes.push(byte);
            return bytes;
        }
        bytes.push(byte | 0x80);
    }
}
