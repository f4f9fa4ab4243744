//! JSON schemas for the fields whose Rust type does not say what the CRD
//! should: embedded Kubernetes types and int-or-string values. They follow
//! the shapes OpenKruise's own CRDs use, so both accept the same objects.

use schemars::{Schema, SchemaGenerator, json_schema};

/// `IntOrString`: an integer or a string such as `"20%"`.
pub fn int_or_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{ "type": "integer" }, { "type": "string" }],
        "x-kubernetes-int-or-string": true
    })
}

/// An embedded Kubernetes object kept as written (pod templates, PVC
/// templates, volumes): the API server stores it without pruning and the
/// pod's own validation applies where it ends up.
pub fn preserve_unknown(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// A free-form object that must still be an object.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// `metav1.Time`.
pub fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time" })
}

/// `metav1.LabelSelector`, atomic as in Kubernetes.
pub fn label_selector(generator: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "matchExpressions": match_expressions(generator),
            "matchLabels": {
                "type": "object",
                "additionalProperties": { "type": "string" }
            }
        },
        "x-kubernetes-map-type": "atomic"
    })
}

/// `metav1.LabelSelector.matchExpressions`.
pub fn match_expressions(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "key": { "type": "string" },
                "operator": { "type": "string" },
                "values": {
                    "type": "array",
                    "items": { "type": "string" },
                    "x-kubernetes-list-type": "atomic"
                }
            },
            "required": ["key", "operator"]
        },
        "x-kubernetes-list-type": "atomic"
    })
}

/// A list of `corev1.LocalObjectReference` (image pull secrets).
pub fn local_object_references(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": { "name": { "type": "string", "default": "" } },
            "x-kubernetes-map-type": "atomic"
        }
    })
}

/// `corev1.ObjectFieldSelector` (a downward-API field reference).
pub fn object_field_selector(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "apiVersion": { "type": "string" },
            "fieldPath": { "type": "string" }
        },
        "required": ["fieldPath"],
        "x-kubernetes-map-type": "atomic"
    })
}
