//! The `hashcode` annotation (spec 07 §1.3): lowercase hex SHA-256 of the
//! raw bytes of `spec.resource` as the API server serves them.
//!
//! The API server stores a custom resource as Go's `encoding/json` writes
//! its unstructured map: compact, keys sorted, `<`, `>`, `&`, U+2028 and
//! U+2029 escaped. [`crate::go_json::unstructured`] writes a parsed
//! resource the same way, so [`resource_hash`] of the parsed
//! `spec.resource` equals OpenKruise's hash of the raw bytes.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The hash of a parsed `spec.resource`.
pub fn resource_hash(resource: &Value) -> String {
    raw_resource_hash(crate::go_json::unstructured(resource).as_bytes())
}

/// The hash of `spec.resource` bytes exactly as read.
pub fn raw_resource_hash(raw: &[u8]) -> String {
    Sha256::digest(raw)
        .iter()
        .fold(String::new(), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}
