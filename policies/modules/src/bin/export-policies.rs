//! Writes the annotated modules to `artifacts/policies/` and a
//! ClusterAdmissionPolicy for each to `artifacts/kubewarden/`.
//!
//! `cargo run -p kruise-policy-modules --bin export-policies [ARTIFACTS_DIR]`

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let artifacts = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../artifacts"),
        PathBuf::from,
    );
    match export(&artifacts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("export-policies: {message}");
            ExitCode::FAILURE
        }
    }
}

fn export(artifacts: &Path) -> Result<(), String> {
    for module in kruise_policy_modules::ALL {
        let wasm = artifacts
            .join("policies")
            .join(format!("{}.wasm", module.name));
        write(&wasm, module.wasm)?;
        let policy = kruise_policy_modules::kubewarden_yaml(module)?;
        let yaml = artifacts
            .join("kubewarden")
            .join(format!("{}.yaml", module.name));
        write(&yaml, policy.as_bytes())?;
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
