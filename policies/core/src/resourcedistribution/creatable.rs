//! Whether the API server would create the distributed resource: the
//! webhook's dry-run create, checked offline with the rules Kubernetes
//! applies to a Secret or ConfigMap (names, keys, base64, sizes, the keys
//! each Secret type requires, label and annotation syntax).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value};

use super::base64;
use super::embedded::{ResourceIdentity, ResourceKind};
use super::validation::Violation;
use crate::names::{config_key_error, dns_subdomain_error};
use crate::selector;

/// Etcd's object limit as Kubernetes applies it to Secret and ConfigMap
/// payloads.
const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
/// Kubernetes' limit on the total size of an object's annotations.
const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// Everything the API server's create of this resource would refuse.
pub(super) fn check_creatable(resource: &Value, identity: &ResourceIdentity) -> Vec<Violation> {
    let mut violations = Vec::new();
    let path = "spec.resource";
    let Some(fields) = resource.as_object() else {
        return violations;
    };
    check_metadata(fields.get("metadata"), identity, &mut violations);
    match identity.kind {
        ResourceKind::Secret => check_secret(fields, &mut violations),
        ResourceKind::ConfigMap => check_config_map(fields, &mut violations),
    }
    if let Some(immutable) = fields.get("immutable")
        && !immutable.is_boolean()
        && !immutable.is_null()
    {
        violations.push(Violation::new(
            format!("{path}.immutable"),
            "must be a boolean",
        ));
    }
    violations
}

fn check_metadata(metadata: Option<&Value>, identity: &ResourceIdentity, out: &mut Vec<Violation>) {
    let path = "spec.resource.metadata";
    let Some(metadata) = metadata.and_then(Value::as_object) else {
        out.push(Violation::new(path, "must be an object"));
        return;
    };
    if let Some(message) = dns_subdomain_error(&identity.name) {
        out.push(Violation::new(format!("{path}.name"), message));
    }
    if metadata
        .get("resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| !v.is_empty())
    {
        out.push(Violation::new(
            format!("{path}.resourceVersion"),
            "must be empty: it is set by the API server, not on objects to create",
        ));
    }
    if let Some(labels) = string_map(metadata.get("labels"), &format!("{path}.labels"), out) {
        for (key, value) in labels {
            let single = LabelSelector {
                match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
                match_expressions: None,
            };
            if let Err(e) = selector::matches(&single, &BTreeMap::new()) {
                out.push(Violation::new(format!("{path}.labels"), e.to_string()));
            }
        }
    }
    let annotations_path = format!("{path}.annotations");
    if let Some(annotations) = string_map(metadata.get("annotations"), &annotations_path, out) {
        let mut total = 0;
        for (key, value) in annotations {
            total += key.len() + value.len();
            if !selector::is_qualified_name(key) {
                out.push(Violation::new(
                    &annotations_path,
                    format!(
                        "{key:?} is not a valid annotation key (a qualified name: [prefix/]name)"
                    ),
                ));
            }
        }
        if total > MAX_ANNOTATION_BYTES {
            out.push(Violation::new(
                annotations_path,
                format!("may not be more than {MAX_ANNOTATION_BYTES} bytes in total"),
            ));
        }
    }
}

fn check_secret(fields: &Map<String, Value>, out: &mut Vec<Violation>) {
    let path = "spec.resource";
    let mut payload: BTreeMap<&str, usize> = BTreeMap::new();
    let mut decoded: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
    if let Some(data) = string_map(fields.get("data"), &format!("{path}.data"), out) {
        for (key, value) in data {
            check_key(&format!("{path}.data"), key, out);
            match base64::decode(value) {
                Some(bytes) => {
                    payload.insert(key, bytes.len());
                    decoded.insert(key, bytes);
                }
                None => out.push(Violation::new(
                    format!("{path}.data[{key}]"),
                    "must be base64 (standard alphabet, padded)",
                )),
            }
        }
    }
    if let Some(string_data) =
        string_map(fields.get("stringData"), &format!("{path}.stringData"), out)
    {
        for (key, value) in string_data {
            check_key(&format!("{path}.stringData"), key, out);
            // The API server merges stringData over data.
            payload.insert(key, value.len());
            decoded.insert(key, value.as_bytes().to_vec());
        }
    }
    check_size(&format!("{path}.data"), payload.values().sum(), out);
    let secret_type = match fields.get("type") {
        None | Some(Value::Null) => "Opaque",
        Some(Value::String(t)) => t.as_str(),
        Some(_) => {
            out.push(Violation::new(format!("{path}.type"), "must be a string"));
            return;
        }
    };
    check_secret_type(fields, secret_type, &decoded, out);
}

fn check_secret_type(
    fields: &Map<String, Value>,
    secret_type: &str,
    data: &BTreeMap<&str, Vec<u8>>,
    out: &mut Vec<Violation>,
) {
    let path = "spec.resource.data";
    let require = |key: &str, out: &mut Vec<Violation>| {
        if !data.contains_key(key) {
            out.push(Violation::new(
                format!("{path}[{key}]"),
                format!("is required for a Secret of type {secret_type}"),
            ));
        }
    };
    let require_json = |key: &str, out: &mut Vec<Violation>| match data.get(key) {
        None => require(key, out),
        Some(bytes) => {
            if serde_json::from_slice::<Value>(bytes).is_err() {
                out.push(Violation::new(
                    format!("{path}[{key}]"),
                    "must be valid JSON",
                ));
            }
        }
    };
    match secret_type {
        "kubernetes.io/service-account-token" => {
            let account = fields
                .get("metadata")
                .and_then(|m| m.get("annotations"))
                .and_then(|a| a.get("kubernetes.io/service-account.name"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            if account.is_empty() {
                out.push(Violation::new(
                    "spec.resource.metadata.annotations[kubernetes.io/service-account.name]",
                    "is required for a Secret of type kubernetes.io/service-account-token",
                ));
            }
        }
        "kubernetes.io/dockercfg" => require_json(".dockercfg", out),
        "kubernetes.io/dockerconfigjson" => require_json(".dockerconfigjson", out),
        "kubernetes.io/basic-auth" => {
            if !data.contains_key("username") && !data.contains_key("password") {
                out.push(Violation::new(
                    path,
                    "a Secret of type kubernetes.io/basic-auth needs username or password",
                ));
            }
        }
        "kubernetes.io/ssh-auth" => require("ssh-privatekey", out),
        "kubernetes.io/tls" => {
            require("tls.crt", out);
            require("tls.key", out);
        }
        _ => {}
    }
}

fn check_config_map(fields: &Map<String, Value>, out: &mut Vec<Violation>) {
    let path = "spec.resource";
    let mut total = 0;
    let data = string_map(fields.get("data"), &format!("{path}.data"), out).unwrap_or_default();
    for (key, value) in &data {
        check_key(&format!("{path}.data"), key, out);
        total += value.len();
    }
    let binary_path = format!("{path}.binaryData");
    if let Some(binary) = string_map(fields.get("binaryData"), &binary_path, out) {
        for (key, value) in binary {
            check_key(&binary_path, key, out);
            if data.iter().any(|(k, _)| *k == key) {
                out.push(Violation::new(
                    format!("{binary_path}[{key}]"),
                    "duplicate of a key in data",
                ));
            }
            match base64::decode(value) {
                Some(bytes) => total += bytes.len(),
                None => out.push(Violation::new(
                    format!("{binary_path}[{key}]"),
                    "must be base64 (standard alphabet, padded)",
                )),
            }
        }
    }
    check_size(&format!("{path}.data"), total, out);
}

fn check_key(path: &str, key: &str, out: &mut Vec<Violation>) {
    if let Some(message) = config_key_error(key) {
        out.push(Violation::new(path, format!("{key:?}: {message}")));
    }
}

fn check_size(path: &str, total: usize, out: &mut Vec<Violation>) {
    if total > MAX_PAYLOAD_BYTES {
        out.push(Violation::new(
            path,
            format!("the payload is {total} bytes, more than the {MAX_PAYLOAD_BYTES} allowed"),
        ));
    }
}

/// The entries of a string-to-string map field; a violation if the field
/// is there but is something else. Absent or null is `None`.
fn string_map<'a>(
    value: Option<&'a Value>,
    path: &str,
    out: &mut Vec<Violation>,
) -> Option<Vec<(&'a str, &'a str)>> {
    let fields = match value? {
        Value::Null => return None,
        Value::Object(fields) => fields,
        _ => {
            out.push(Violation::new(path, "must be a map of strings"));
            return None;
        }
    };
    let mut entries = Vec::with_capacity(fields.len());
    for (key, value) in fields {
        match value.as_str() {
            Some(text) => entries.push((key.as_str(), text)),
            None => out.push(Violation::new(format!("{path}[{key}]"), "must be a string")),
        }
    }
    Some(entries)
}
