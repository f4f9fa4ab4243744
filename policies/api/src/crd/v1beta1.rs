//! The v1beta1 schemas, made from the v1alpha1 ones: OpenKruise's v1beta1
//! spells a few fields differently (kruise_core::conversion moves them
//! between the versions) and adds a few. Each edit below is one of those
//! differences; everything else is the v1alpha1 schema.

use serde_json::{Map, Value, json};

/// The v1beta1 schema of `kind`, from its v1alpha1 `schema`.
pub(super) fn schema(kind: &str, mut schema: Value) -> Result<Value, String> {
    match kind {
        "CloneSet" => clone_set(&mut schema)?,
        "SidecarSet" => {
            let properties = properties_of(&mut schema, &["spec"])?;
            properties.remove("namespace");
            properties.insert(
                "customVersion".to_owned(),
                described(
                    "string",
                    "The user's version name, kept on the SidecarSet's revisions (v1alpha1: a label).",
                ),
            );
        }
        "ResourceDistribution" => {
            let targets = properties_of(&mut schema, &["spec", "targets"])?;
            rename(targets, "namespaceLabelSelector", "namespaceSelector")?;
            let condition = properties_of(&mut schema, &["status", "conditions", "[]"])?;
            rename(condition, "failedNamespace", "failedNamespaces")?;
        }
        "ContainerRecreateRequest" => {
            // v1beta1 lists the values v1alpha1 only describes.
            let phases = json!(["Pending", "Recreating", "Succeeded", "Failed", "Completed"]);
            let strategy = properties_of(&mut schema, &["spec", "strategy"])?;
            set_enum(strategy, "failurePolicy", json!(["Fail", "Ignore"]))?;
            let state = properties_of(&mut schema, &["status", "containerRecreateStates", "[]"])?;
            set_enum(state, "phase", phases.clone())?;
            let status = properties_of(&mut schema, &["status"])?;
            set_enum(status, "phase", phases)?;
            status.insert("conditions".to_owned(), conditions());
            status.insert("containerStatusSnapshot".to_owned(), container_snapshot());
        }
        "NodeImage" => {
            let secret =
                properties_of(&mut schema, &["spec", "images", "{}", "pullSecrets", "[]"])?;
            secret.insert(
                "mode".to_owned(),
                described("string", "How the secret is used for the pull."),
            );
        }
        "ImagePullJob" => {}
        _ => return Err(format!("no v1beta1 schema for {kind}")),
    }
    Ok(schema)
}

/// v1alpha1's strategy `type` and rolling fields become v1beta1's `type`
/// (RollingUpdate or OnDelete) and `rollingUpdate`, with the pod update
/// policy inside; PVC reuse is switched on instead of off.
fn clone_set(schema: &mut Value) -> Result<(), String> {
    let scale = properties_of(schema, &["spec", "scaleStrategy"])?;
    scale.remove("disablePVCReuse");
    scale.insert(
        "enablePVCReuse".to_owned(),
        described(
            "boolean",
            "Reuse the claims of a deleted pod's instance id.",
        ),
    );
    scale.insert(
        "excludePreparingDelete".to_owned(),
        described(
            "boolean",
            "Do not count PreparingDelete pods as replicas (v1alpha1: a label).",
        ),
    );
    let alpha = properties_of(schema, &["spec", "updateStrategy"])?;
    let mut rolling = std::mem::take(alpha);
    rolling.remove("type");
    rolling.insert(
        "podUpdatePolicy".to_owned(),
        described("string", "ReCreate, InPlaceIfPossible or InPlaceOnly."),
    );
    alpha.insert(
        "type".to_owned(),
        described("string", "RollingUpdate (default) or OnDelete."),
    );
    alpha.insert(
        "rollingUpdate".to_owned(),
        json!({
            "type": "object",
            "description": "How pods are replaced or updated in place.",
            "properties": rolling,
        }),
    );
    Ok(())
}

/// Kubernetes' `metav1.Condition` list, as OpenKruise's schema spells it.
fn conditions() -> Value {
    json!({
        "type": "array",
        "description": "PreRecreateGrace while the pod is held not-ready (v1alpha1: an annotation).",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "message": {"type": "string", "maxLength": 32768},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                "reason": {
                    "type": "string", "minLength": 1, "maxLength": 1024,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                },
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "type": {
                    "type": "string", "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                },
            },
        },
    })
}

fn container_snapshot() -> Value {
    json!({
        "type": "array",
        "description": "The containers as the controller saw them (v1alpha1: an annotation).",
        "items": {
            "type": "object",
            "required": ["name", "ready", "restartCount"],
            "properties": {
                "containerID": {"type": "string"},
                "name": {"type": "string"},
                "ready": {"type": "boolean"},
                "restartCount": {"type": "integer", "format": "int32"},
            },
        },
    })
}

fn described(type_: &str, description: &str) -> Value {
    json!({"type": type_, "description": description})
}

/// The `properties` of the node at `path` below the root (`[]` steps into
/// a list's items, `{}` into a map's values).
fn properties_of<'a>(
    schema: &'a mut Value,
    path: &[&str],
) -> Result<&'a mut Map<String, Value>, String> {
    let mut node = schema;
    for step in path {
        node = match *step {
            "[]" => node.get_mut("items"),
            "{}" => node.get_mut("additionalProperties"),
            name => node.get_mut("properties").and_then(|p| p.get_mut(name)),
        }
        .ok_or_else(|| format!("the v1alpha1 schema has no {}", path.join(".")))?;
    }
    node.get_mut("properties")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| format!("the v1alpha1 schema's {} has no properties", path.join(".")))
}

fn set_enum(properties: &mut Map<String, Value>, name: &str, values: Value) -> Result<(), String> {
    let node = properties
        .get_mut(name)
        .ok_or_else(|| format!("the v1alpha1 schema has no {name}"))?;
    node["enum"] = values;
    Ok(())
}

fn rename(properties: &mut Map<String, Value>, from: &str, to: &str) -> Result<(), String> {
    let node = properties
        .remove(from)
        .ok_or_else(|| format!("the v1alpha1 schema has no {from}"))?;
    properties.insert(to.to_owned(), node);
    Ok(())
}
