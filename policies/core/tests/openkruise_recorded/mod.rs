//! The data recorded from OpenKruise v1.9.0's own code
//! (policies/fixtures/openkruise-v1.9.0, its README says how). Each test
//! file uses what it needs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;

fn recorded(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/openkruise-v1.9.0")
        .join(relative)
}

fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every pod webhook case (`webhook-cases/`), by file name.
pub fn webhook_cases() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(recorded("webhook-cases"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    kruise_core::ordered::sort(&mut files);
    files
        .iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, read(path))
        })
        .collect()
}

/// The user's three CloneSets as OpenKruise stores them and names their
/// revisions (`cloneset-revisions/cs<N>.json`).
pub fn cloneset_revisions() -> Vec<(String, Value)> {
    (0..3)
        .map(|index| {
            let path = recorded(&format!("cloneset-revisions/cs{index}.json"));
            (format!("cs{index}"), read(&path))
        })
        .collect()
}
