//! The shared golden cases (policies/fixtures) and the request shapes the
//! modules are fed in tests and benchmarks, kept in one place so the host's
//! tests and the modules' tests read them the same way.

use std::path::PathBuf;

use serde_json::{Value, json};

/// policies/fixtures in this checkout.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The YAML cases of one fixture folder, by file name, sorted.
pub fn golden_cases(folder: &str) -> Result<Vec<(String, Value)>, String> {
    files(folder, "yaml", |text| {
        serde_yaml::from_str(text).map_err(|e| e.to_string())
    })
}

/// The pod webhook cases recorded from OpenKruise v1.9.0's own code
/// (`openkruise-v1.9.0/webhook-cases`, one JSON file each), by file name.
pub fn openkruise_webhook_cases() -> Result<Vec<(String, Value)>, String> {
    files("openkruise-v1.9.0/webhook-cases", "json", |text| {
        serde_json::from_str(text).map_err(|e| e.to_string())
    })
}

/// Each `.<extension>` file of a fixture folder read by `parse`, by file
/// name, sorted.
fn files(
    folder: &str,
    extension: &str,
    parse: impl Fn(&str) -> Result<Value, String>,
) -> Result<Vec<(String, Value)>, String> {
    let folder = dir().join(folder);
    let entries = std::fs::read_dir(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    let mut cases = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_none_or(|e| e != extension) {
            continue;
        }
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{name}: {e}"))?;
        cases.push((
            name.clone(),
            parse(&text).map_err(|e| format!("{name}: {e}"))?,
        ));
    }
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(cases)
}

/// An AdmissionRequest creating `object`, shaped as policy-server sends it:
/// absent optionals are omitted, never null.
pub fn pod_create(object: &Value) -> Value {
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "userInfo": {"username": "admin", "groups": ["system:masters"]},
        "object": object,
        "dryRun": false,
    });
    for key in ["name", "namespace"] {
        if let Some(value) = object["metadata"][key].as_str() {
            request[key] = json!(value);
        }
    }
    request
}

/// Sets the `updateTimestamp` of every record in the SidecarSet hash
/// annotations of `metadata` to one value: a guest takes it from its clock.
/// Annotation values become parsed JSON, so compare both sides normalised.
pub fn blank_hash_timestamps(metadata: &mut Value) -> Result<(), String> {
    let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    else {
        return Ok(());
    };
    for key in [
        "kruise.io/sidecarset-hash",
        "kruise.io/sidecarset-hash-without-image",
    ] {
        let Some(text) = annotations.get(key).and_then(Value::as_str) else {
            continue;
        };
        let mut records: Value = serde_json::from_str(text).map_err(|e| format!("{key}: {e}"))?;
        for record in records
            .as_object_mut()
            .into_iter()
            .flat_map(|r| r.values_mut())
        {
            if record.get("updateTimestamp").is_some() {
                record["updateTimestamp"] = json!("<now>");
            }
        }
        annotations.insert(key.to_owned(), records);
    }
    Ok(())
}

/// An answer's text with what a guest draws blanked, so that two runs of
/// one request compare equal: the clock (see `blank_timestamps`) and, for
/// a pod named from `generate_name`, the random suffix.
pub fn blank_drawn_values(text: &str, generate_name: Option<&str>) -> String {
    let text = blank_timestamps(text);
    match generate_name {
        Some(prefix) => blank_name_suffix(&text, prefix),
        None => text,
    }
}

/// Blanks what the guest took from the clock: the `updateTimestamp` of the
/// SidecarSet hash records, which sit JSON-escaped inside an annotation
/// (`\"updateTimestamp\":\"2026-…Z\"`).
fn blank_timestamps(text: &str) -> String {
    const KEY: &str = r#"updateTimestamp\":\""#;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        let value_start = at + KEY.len();
        out.push_str(&rest[..value_start]);
        out.push_str("<now>");
        let value_len = rest[value_start..].find('\\').unwrap_or(0);
        rest = &rest[value_start + value_len..];
    }
    out.push_str(rest);
    out
}

/// Blanks the 5 random characters the guest appends to `generateName`.
fn blank_name_suffix(text: &str, prefix: &str) -> String {
    const ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";
    let quoted = format!("\"{prefix}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&quoted) {
        let suffix_start = at + quoted.len();
        out.push_str(&rest[..suffix_start]);
        rest = &rest[suffix_start..];
        let drawn = rest
            .get(..5)
            .filter(|s| s.chars().all(|c| ALPHABET.contains(c)));
        if let Some(drawn) = drawn {
            out.push_str("*****");
            rest = &rest[drawn.len()..];
        }
    }
    out.push_str(rest);
    out
}

/// One case of a `<kind>/validation.yaml` fixture: the valid base with one
/// value set, and the field the validating module must then refuse.
#[derive(Debug, Clone)]
pub struct ValidationCase {
    pub name: String,
    pub object: Value,
    pub refused: String,
}

/// The base object and the cases of `policies/fixtures/<kind>/validation.yaml`.
pub fn validation_cases(kind: &str) -> Result<(Value, Vec<ValidationCase>), String> {
    let path = dir().join(kind).join("validation.yaml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: Value =
        serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let base = file["base"].clone();
    let mut cases = Vec::new();
    for case in file["cases"].as_array().into_iter().flatten() {
        let text = |key: &str| {
            case[key]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{}: a case without {key}", path.display()))
        };
        let mut object = base.clone();
        let pointer = text("set")?;
        let (parent, key) = pointer.rsplit_once('/').unwrap_or_default();
        match object.pointer_mut(parent) {
            Some(Value::Array(items)) => {
                let slot = key.parse::<usize>().ok().and_then(|i| items.get_mut(i));
                *slot.ok_or_else(|| format!("no item {pointer}"))? = case["value"].clone();
            }
            Some(Value::Object(fields)) => {
                fields.insert(key.to_owned(), case["value"].clone());
            }
            _ => return Err(format!("{}: nothing at {parent}", path.display())),
        }
        cases.push(ValidationCase {
            name: text("name")?,
            object,
            refused: text("refused")?,
        });
    }
    Ok((base, cases))
}

/// An AdmissionRequest of `operation` on an `apps.kruise.io/v1alpha1`
/// object of `kind` (plural `resource`), shaped as policy-server sends it.
pub fn kruise_request(
    kind: &str,
    resource: &str,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
) -> Value {
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "apps.kruise.io", "version": "v1alpha1", "kind": kind},
        "resource": {"group": "apps.kruise.io", "version": "v1alpha1", "resource": resource},
        "name": object["metadata"]["name"],
        "operation": operation,
        "userInfo": {"username": "admin", "groups": ["system:masters"]},
        "object": object,
        "dryRun": false,
    });
    if let Some(namespace) = object["metadata"]["namespace"].as_str() {
        request["namespace"] = json!(namespace);
    }
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    request
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_touches_only_what_is_drawn() {
        let hash =
            r#"{"a":"{\"s\":{\"updateTimestamp\":\"2026-11-29T10:00:01Z\",\"hash\":\"x\"}}"}"#;
        assert_eq!(
            blank_timestamps(hash),
            r#"{"a":"{\"s\":{\"updateTimestamp\":\"<now>\",\"hash\":\"x\"}}"}"#
        );
        assert_eq!(
            blank_name_suffix(
                r#"{"name":"web-x7k2m","cm":"web-x7k2m-barrier","generateName":"web-"}"#,
                "web-"
            ),
            r#"{"name":"web-*****","cm":"web-*****-barrier","generateName":"web-"}"#
        );
        assert_eq!(
            blank_name_suffix(r#"{"name":"web-AAAAA"}"#, "web-"),
            r#"{"name":"web-AAAAA"}"#
        );
    }

    #[test]
    fn every_fixture_folder_reads() {
        for folder in ["injection", "launch-priority"] {
            assert!(golden_cases(folder).unwrap().len() >= 10, "{folder}");
        }
        assert!(
            golden_cases("no-such-folder")
                .unwrap_err()
                .contains("no-such-folder")
        );
    }

    #[test]
    fn absent_names_are_omitted_not_null() {
        let request = pod_create(&json!({"metadata": {"name": "p"}}));
        assert_eq!(request["name"], "p");
        assert!(request.get("namespace").is_none());
    }

    #[test]
    fn only_timestamps_are_blanked() {
        let mut metadata = json!({"annotations": {
            "kruise.io/sidecarset-hash": r#"{"s":{"updateTimestamp":"2026-01-01T00:00:00Z","hash":"h"}}"#,
            "other": "x"}});
        blank_hash_timestamps(&mut metadata).unwrap();
        assert_eq!(
            metadata["annotations"]["kruise.io/sidecarset-hash"],
            json!({"s": {"updateTimestamp": "<now>", "hash": "h"}})
        );
        assert_eq!(metadata["annotations"]["other"], "x");
    }
}
