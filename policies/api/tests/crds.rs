//! The generated CRDs: fresh on disk, structural as kube-apiserver demands,
//! and accepting everything OpenKruise's own v1alpha1 CRDs accept.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use kruise_api::crd::{self, GeneratedCrd};
use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The versions OpenKruise v1.9 serves, in its order.
const VERSIONS: [&str; 2] = ["v1alpha1", "v1beta1"];

fn version_of<'a>(crd: &'a Value, name: &str) -> &'a Value {
    crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("a {name} version"))
}

#[test]
fn artifacts_are_fresh() {
    let mut stale = Vec::new();
    for generated in crd::all().unwrap() {
        let path = workspace()
            .join("artifacts/crds")
            .join(&generated.file_name);
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if on_disk != generated.to_yaml().unwrap() {
            stale.push(generated.file_name);
        }
    }
    assert!(
        stale.is_empty(),
        "stale CRDs {stale:?}: run `cargo run -p kruise-api --bin crdgen`"
    );
}

// ---- structural schema rules (apiextensions validation) ----

/// The keys a `JSONSchemaProps` can carry.
const SCHEMA_KEYS: &[&str] = &[
    "description",
    "type",
    "format",
    "title",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "properties",
    "additionalProperties",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
    "example",
    "externalDocs",
];
const TYPES: &[&str] = &["object", "array", "string", "integer", "number", "boolean"];

fn structural_violations(schema: &Value, path: &str, out: &mut Vec<String>) {
    let Some(node) = schema.as_object() else {
        out.push(format!("{path}: not an object"));
        return;
    };
    for key in node.keys() {
        if !SCHEMA_KEYS.contains(&key.as_str()) {
            out.push(format!("{path}: unknown schema key {key}"));
        }
    }
    let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    match node.get("type").and_then(Value::as_str) {
        Some(t) if !TYPES.contains(&t) => out.push(format!("{path}: bad type {t}")),
        Some(_) if int_or_string => out.push(format!("{path}: int-or-string with a type")),
        None if !int_or_string && !preserve => out.push(format!("{path}: no type")),
        _ => {}
    }
    if int_or_string {
        let expected = serde_json::json!([{ "type": "integer" }, { "type": "string" }]);
        if node.get("anyOf").is_some_and(|any| any != &expected) {
            out.push(format!(
                "{path}: int-or-string anyOf must be integer|string"
            ));
        }
    } else if node.contains_key("anyOf") || node.contains_key("oneOf") || node.contains_key("allOf")
    {
        out.push(format!("{path}: value validation without int-or-string"));
    }
    if node.contains_key("properties") && node.contains_key("additionalProperties") {
        out.push(format!(
            "{path}: properties together with additionalProperties"
        ));
    }
    if node.get("additionalProperties") == Some(&Value::Bool(false)) {
        out.push(format!("{path}: additionalProperties false"));
    }
    if node.get("uniqueItems") == Some(&Value::Bool(true)) {
        out.push(format!("{path}: uniqueItems true"));
    }
    if node.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map")
        && !node.contains_key("x-kubernetes-list-map-keys")
    {
        out.push(format!("{path}: list-type map without keys"));
    }
    if let Some(required) = node.get("required").and_then(Value::as_array) {
        let properties = node.get("properties").and_then(Value::as_object);
        for name in required {
            let known = name
                .as_str()
                .is_some_and(|n| properties.is_some_and(|p| p.contains_key(n)));
            if !known {
                out.push(format!("{path}: required {name} is not a property"));
            }
        }
    }
    match node.get("items") {
        Some(Value::Array(_)) => out.push(format!("{path}: items must be one schema")),
        Some(items) => structural_violations(items, &format!("{path}[]"), out),
        None if node.get("type").and_then(Value::as_str) == Some("array") => {
            out.push(format!("{path}: array without items"));
        }
        None => {}
    }
    if let Some(Value::Object(properties)) = node.get("properties") {
        for (name, child) in properties {
            structural_violations(child, &format!("{path}.{name}"), out);
        }
    }
    if let Some(additional @ Value::Object(_)) = node.get("additionalProperties") {
        structural_violations(additional, &format!("{path}{{}}"), out);
    }
}

fn check_generated(generated: &GeneratedCrd, out: &mut Vec<String>) {
    for name in VERSIONS {
        check_version(generated, version_of(&generated.crd, name), out);
    }
}

fn check_version(generated: &GeneratedCrd, version: &Value, out: &mut Vec<String>) {
    let root = &version["schema"]["openAPIV3Schema"];
    let mut violations = Vec::new();
    structural_violations(root, "", &mut violations);
    // The root metadata may only be typed object (the server owns it).
    if root["properties"]["metadata"] != serde_json::json!({ "type": "object" }) {
        violations.push(".metadata: must be a bare object".to_owned());
    }
    if root["type"] != "object" {
        violations.push("root must be type object".to_owned());
    }
    out.extend(
        violations
            .into_iter()
            .map(|v| format!("{}: {v}", generated.file_name)),
    );
}

#[test]
fn generated_crds_are_structural() {
    let mut violations = Vec::new();
    for generated in crd::all().unwrap() {
        check_generated(&generated, &mut violations);
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn the_structural_check_catches_violations() {
    let bad = serde_json::json!({
        "type": "object",
        "properties": {
            "untyped": { "description": "no type" },
            "both": { "type": "object", "properties": {}, "additionalProperties": { "type": "string" } },
            "ios": { "type": "string", "x-kubernetes-int-or-string": true },
            "ref": { "$ref": "#/definitions/x", "type": "object" },
            "tuple": { "type": "array", "items": [{ "type": "string" }] }
        }
    });
    let mut violations = Vec::new();
    structural_violations(&bad, "", &mut violations);
    for expected in [
        ".untyped: no type",
        ".both: properties together with additionalProperties",
        ".ios: int-or-string with a type",
        ".ref: unknown schema key $ref",
        ".tuple: items must be one schema",
    ] {
        assert!(
            violations.iter().any(|v| v == expected),
            "missed {expected}: {violations:#?}"
        );
    }
}

// ---- comparison with OpenKruise's CRDs ----

/// What one schema node promises, for comparison.
#[derive(Debug, PartialEq, Eq)]
struct NodeFacts {
    type_: Option<String>,
    format: Option<String>,
    enum_: Option<BTreeSet<String>>,
    int_or_string: bool,
    preserve_unknown: bool,
    embedded_resource: bool,
    map_type: Option<String>,
    list_type: Option<String>,
    required: bool,
}

fn flatten(schema: &Value, path: &str, required: bool, out: &mut BTreeMap<String, NodeFacts>) {
    let text = |key: &str| schema.get(key).and_then(Value::as_str).map(str::to_owned);
    let flag = |key: &str| schema.get(key) == Some(&Value::Bool(true));
    let enum_ = schema.get("enum").and_then(Value::as_array).map(|values| {
        values
            .iter()
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
            .collect()
    });
    out.insert(
        path.to_owned(),
        NodeFacts {
            type_: text("type"),
            format: text("format"),
            enum_,
            int_or_string: flag("x-kubernetes-int-or-string"),
            preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
            embedded_resource: flag("x-kubernetes-embedded-resource"),
            map_type: text("x-kubernetes-map-type"),
            list_type: text("x-kubernetes-list-type"),
            required,
        },
    );
    let required_names: BTreeSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, child) in properties {
            flatten(
                child,
                &format!("{path}.{name}"),
                required_names.contains(name.as_str()),
                out,
            );
        }
    }
    if let Some(items) = schema.get("items") {
        flatten(items, &format!("{path}[]"), false, out);
    }
    if let Some(additional @ Value::Object(_)) = schema.get("additionalProperties") {
        flatten(additional, &format!("{path}{{}}"), false, out);
    }
}

/// Paths we have and OpenKruise does not, each with the reason.
const ALLOWED_EXTRA: &[(&str, &str)] = &[];

fn compare(theirs: &Value, ours: &Value, file: &str, out: &mut Vec<String>) {
    for key in ["scope"] {
        if theirs["spec"][key] != ours["spec"][key] {
            out.push(format!(
                "{file}: {key} {} vs ours {}",
                theirs["spec"][key], ours["spec"][key]
            ));
        }
    }
    for key in ["kind", "listKind", "plural", "singular", "shortNames"] {
        if theirs["spec"]["names"][key] != ours["spec"]["names"][key] {
            out.push(format!(
                "{file}: names.{key} {} vs ours {}",
                theirs["spec"]["names"][key], ours["spec"]["names"][key]
            ));
        }
    }
    let served = |crd: &Value| -> Vec<(Value, Value, Value)> {
        crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| (v["name"].clone(), v["served"].clone(), v["storage"].clone()))
            .collect()
    };
    if served(theirs) != served(ours) {
        out.push(format!(
            "{file}: versions {:?} vs ours {:?}",
            served(theirs),
            served(ours)
        ));
    }
    for name in VERSIONS {
        let label = format!("{file} {name}");
        compare_version(
            version_of(theirs, name),
            version_of(ours, name),
            &label,
            out,
        );
    }
}

fn compare_version(their_version: &Value, our_version: &Value, file: &str, out: &mut Vec<String>) {
    if their_version["subresources"] != our_version["subresources"] {
        out.push(format!(
            "{file}: subresources {} vs ours {}",
            their_version["subresources"], our_version["subresources"]
        ));
    }
    let columns = |version: &Value| -> Vec<(Value, Value, Value, Value)> {
        version["additionalPrinterColumns"]
            .as_array()
            .map(|columns| {
                columns
                    .iter()
                    .map(|c| {
                        (
                            c["name"].clone(),
                            c["jsonPath"].clone(),
                            c["type"].clone(),
                            c["priority"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    if columns(their_version) != columns(our_version) {
        out.push(format!(
            "{file}: printer columns {:?} vs ours {:?}",
            columns(their_version),
            columns(our_version)
        ));
    }

    let mut their_nodes = BTreeMap::new();
    let mut our_nodes = BTreeMap::new();
    flatten(
        &their_version["schema"]["openAPIV3Schema"],
        "",
        false,
        &mut their_nodes,
    );
    flatten(
        &our_version["schema"]["openAPIV3Schema"],
        "",
        false,
        &mut our_nodes,
    );
    for (path, their_facts) in &their_nodes {
        match our_nodes.get(path) {
            None => out.push(format!("{file}: missing {path}")),
            Some(our_facts) if our_facts != their_facts => {
                out.push(format!(
                    "{file}: {path} differs: theirs {their_facts:?} ours {our_facts:?}"
                ));
            }
            Some(_) => {}
        }
    }
    for path in our_nodes.keys() {
        // Below a node OpenKruise leaves free-form, extra detail is ours to give.
        let under_free_form = their_nodes
            .iter()
            .any(|(p, facts)| facts.preserve_unknown && path.starts_with(p.as_str()) && path != p);
        let allowed = ALLOWED_EXTRA
            .iter()
            .any(|(p, _)| *p == format!("{file}:{path}"));
        if !their_nodes.contains_key(path) && !under_free_form && !allowed {
            out.push(format!("{file}: extra {path}"));
        }
    }
}

fn reference_dir() -> PathBuf {
    std::env::var_os("KRUISE_REFERENCE_CRDS").map_or_else(
        || workspace().join("../shared/reference/openkruise-crds"),
        PathBuf::from,
    )
}

#[test]
fn generated_crds_match_openkruise() {
    let dir = reference_dir();
    assert!(
        dir.is_dir(),
        "OpenKruise's CRDs are expected in {} (set KRUISE_REFERENCE_CRDS)",
        dir.display()
    );
    let mut differences = Vec::new();
    for generated in crd::all().unwrap() {
        let path = dir.join(&generated.file_name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let theirs: Value = serde_yaml::from_str(&text).unwrap();
        compare(
            &theirs,
            &generated.crd,
            &generated.file_name,
            &mut differences,
        );
    }
    assert!(
        differences.is_empty(),
        "{} differences:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

#[test]
fn the_comparison_reports_missing_and_changed_fields() {
    let generated = crd::all().unwrap().into_iter().next().unwrap();
    let mut theirs = generated.crd.clone();
    let spec = &mut theirs["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    spec["brandNew"] = serde_json::json!({ "type": "string" });
    spec["replicas"]["type"] = serde_json::json!("string");
    theirs["spec"]["names"]["shortNames"] = serde_json::json!(["cs"]);
    let beta = &mut theirs["spec"]["versions"][1];
    beta["storage"] = serde_json::json!(false);
    beta["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["betaOnly"] =
        serde_json::json!({ "type": "string" });
    let mut differences = Vec::new();
    compare(&theirs, &generated.crd, "x", &mut differences);
    for expected in [
        "x v1alpha1: missing .spec.brandNew",
        "x v1beta1: missing .spec.betaOnly",
    ] {
        assert!(
            differences.iter().any(|d| d == expected),
            "missed {expected}: {differences:#?}"
        );
    }
    assert!(
        differences.iter().any(|d| d.starts_with("x: versions")),
        "{differences:#?}"
    );
    assert!(
        differences
            .iter()
            .any(|d| d.starts_with("x v1alpha1: .spec.replicas differs")),
        "{differences:#?}"
    );
    assert!(
        differences
            .iter()
            .any(|d| d.starts_with("x: names.shortNames")),
        "{differences:#?}"
    );
}
