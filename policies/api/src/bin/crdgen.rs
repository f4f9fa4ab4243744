//! Writes the generated CRDs to `artifacts/crds/` (or the folder given).
//!
//! `cargo run -p kruise-api --bin crdgen [DIR]`

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../artifacts/crds"),
        PathBuf::from,
    );
    if let Err(message) = write_all(&dir) {
        eprintln!("crdgen: {message}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn write_all(dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for generated in kruise_api::crd::all()? {
        let path = dir.join(&generated.file_name);
        let yaml = generated
            .to_yaml()
            .map_err(|e| format!("{}: {e}", generated.file_name))?;
        std::fs::write(&path, yaml).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
